//! Redis Cluster (issue 9): a broker on `redis+cluster://` spreads locks
//! over every primary (each lock's keys in the slot of its hash tag), renews
//! leases of many slots in one heartbeat, wakes waiters across nodes, and
//! keeps the lease contract while a slot migrates and a primary fails over
//! under a contended run. Against a real cluster of 3 primaries with 2
//! replicas each on loopback ports.

mod common;

use std::{collections::BTreeSet, time::Duration};

use common::{acquire_req, contract::Run, topology::Cluster, Broker};
use leasehold::proto::{lease_status::State, KeepAliveRequest, LeaseRef};
use tokio::time::Instant;
use tonic::Code;

/// The Redis key of lock `name` (the test broker's prefix is `test:`).
fn key(name: &str) -> String {
    leasehold::store::lease_key("test:", name)
}

/// Locks land on every primary; one heartbeat renews leases of many slots;
/// a waiter is woken by a release published on another node; and through a
/// slot migration and a primary's failover during a contended run, no two
/// clients hold a lock at once and fences keep rising.
#[tokio::test]
async fn the_contract_holds_on_a_cluster_through_migration_and_failover() {
    // Two replicas per primary: after a failover the new primary still has
    // one, so grants acknowledged by a replica (--replica-acks 1) go on.
    let mut cluster = Cluster::start(3, 2).await;
    let seeds: Vec<String> = cluster.live_addrs().iter().map(|a| a.to_string()).collect();
    let url = format!("redis+cluster://{}", seeds.join(","));
    let broker = Broker::start_with(&url, |c| c.replica_acks = 1).await;
    let mut client = broker.client().await;

    // Spread: 48 locks over the slots of every primary.
    let mut leases = Vec::new();
    for i in 0..48 {
        let name = format!("spread/{i}");
        let deadline = Instant::now() + Duration::from_secs(20);
        let lease = loop {
            match client
                .acquire(acquire_req(&name, 30_000, "spread", 0))
                .await
            {
                Ok(r) => break r.into_inner().lease.unwrap(),
                Err(s) if s.code() == Code::Unavailable && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await
                }
                Err(s) => panic!("acquire {name}: {s:?}"),
            }
        };
        leases.push(lease);
    }
    let mut owners = BTreeSet::new();
    for lease in &leases {
        owners.insert(cluster.holder_of(&key(&lease.name)).await.expect("stored"));
    }
    assert_eq!(owners.len(), 3, "locks on {owners:?}");
    // One heartbeat renews all 48, whatever their slots.
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tx.send(KeepAliveRequest {
        seq: 1,
        leases: leases
            .iter()
            .map(|l| LeaseRef {
                name: l.name.clone(),
                owner_token: l.owner_token.clone(),
                ttl_ms: 0,
            })
            .collect(),
    })
    .await
    .unwrap();
    let mut beats = client
        .keep_alive(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let answer = beats.message().await.unwrap().unwrap();
    assert_eq!(answer.leases.len(), 48);
    for (status, lease) in answer.leases.iter().zip(&leases) {
        assert_eq!(status.state(), State::Alive, "{status:?}");
        assert_eq!(status.fence, lease.fence);
    }
    drop(tx);

    // A waiter is woken by the release, published on the lock's node and
    // heard on the broker's subscription node: within milliseconds, where
    // its fallback timer (a look every second) would come at a random point
    // of that second. Five handoffs all under 300 ms: by the timer alone,
    // a 0.2% chance.
    for (round, held) in leases.iter().take(5).enumerate() {
        let waiter = tokio::spawn({
            let mut client = broker.client().await;
            let name = held.name.clone();
            async move {
                let r = client
                    .acquire(acquire_req(&name, 30_000, "waiter", 20_000))
                    .await;
                (r, Instant::now())
            }
        });
        common::eventually(Duration::from_secs(10), "the waiter is queued", || {
            let mut client = client.clone();
            let name = held.name.clone();
            async move { common::local_waiters(&mut client, &name).await == 1 }
        })
        .await;
        let released = Instant::now();
        client
            .release(leasehold::proto::ReleaseRequest {
                name: held.name.clone(),
                owner_token: held.owner_token.clone(),
            })
            .await
            .unwrap();
        let (granted, at) = waiter.await.unwrap();
        let granted = granted.expect("the waiter is granted").into_inner();
        assert!(granted.lease.unwrap().fence > held.fence);
        let took = at.saturating_duration_since(released);
        assert!(
            took < Duration::from_millis(300),
            "handoff {round} took {took:?}: the release was not heard"
        );
    }

    // The contended run.
    static LOCKS: [&str; 3] = ["a", "b", "c"];
    let run = Run::start(&LOCKS, 6, || broker.client()).await;
    // Move the slot of lock "a" to another primary, keys and all.
    // (Its owner by slot: between two grants the lock has no key at all.)
    let from = cluster
        .owner_of_slot(cluster.slot_of(&key("a")).await)
        .await;
    let primaries = cluster.primaries().await;
    let to = *primaries.iter().find(|p| **p != from).unwrap();
    let migrated_at = Instant::now();
    cluster.migrate_key_slot(&key("a"), to).await;
    run.grants_after(Some("a"), migrated_at, 10).await;

    // Kill the primary of lock "b"; its replica takes over.
    let victim = cluster
        .owner_of_slot(cluster.slot_of(&key("b")).await)
        .await;
    let killed_at = Instant::now();
    cluster.kill_node(cluster.index_of(victim));
    cluster.wait_until_ok(Duration::from_secs(30)).await;
    let promoted = killed_at.elapsed();
    let others = run.grants_after(None, killed_at, 1).await;
    let resumed = run.grants_after(Some("b"), killed_at, 10).await;
    run.stop_and_check().await;
    eprintln!(
        "cluster failover, after the kill: cluster ok {} ms; first grant asked for after \
         the kill: of any lock {} ms, of the lock on the killed primary {} ms",
        promoted.as_millis(),
        (others - killed_at).as_millis(),
        (resumed - killed_at).as_millis()
    );
}
