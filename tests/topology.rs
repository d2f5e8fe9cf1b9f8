//! Self-tests of the topology harness (tests/harness/src/topology.rs): real
//! redis-server processes as a Sentinel deployment and as a Redis Cluster,
//! failed over and resharded under the tests' eyes.

use leasehold_testkit as common;

use std::{collections::BTreeSet, time::Duration, time::Instant};

use common::topology::{query, query_pipe, Cluster, Sentinel};
use leasehold_server::store::lease_key;
use redis::{ErrorKind, ServerErrorKind};

/// Generous: failovers are slower on a loaded 2-core machine.
const FAILOVER_LIMIT: Duration = Duration::from_secs(40);

/// The sentinels fail over to a replica, which has the primary's data, when
/// the primary is killed, and then all name that replica as the primary.
#[tokio::test]
async fn sentinel_fails_over_to_a_replica_when_the_primary_is_killed() {
    let started = Instant::now();
    let mut topology = Sentinel::start().await;
    let up = started.elapsed();
    let primary = topology.primary().await;
    assert_eq!(
        primary,
        topology.data_addrs()[0],
        "the first node is primary"
    );
    assert_eq!(topology.sentinel_addrs().len(), 3);
    // WAIT on the connection that wrote: it counts that connection's writes.
    let (acked,): (i64,) = query_pipe(
        primary,
        redis::pipe()
            .cmd("SET")
            .arg("before")
            .arg("failover")
            .ignore()
            .cmd("WAIT")
            .arg(2)
            .arg(5_000),
    )
    .await
    .unwrap();
    assert_eq!(acked, 2, "both replicas have the write");

    let killed = topology.kill_primary().await;
    assert_eq!(killed, primary);
    let kill = Instant::now();
    let new = topology.wait_for_new_primary(FAILOVER_LIMIT).await;
    let failover = kill.elapsed();
    assert_ne!(new, killed);
    assert!(
        topology.data_addrs()[1..].contains(&new),
        "a replica took over"
    );
    assert_eq!(topology.primary().await, new);
    let value: String = query(new, redis::cmd("GET").arg("before")).await.unwrap();
    assert_eq!(value, "failover");
    // The other replica is pointed at the new primary.
    topology.await_replicas(1, FAILOVER_LIMIT).await;
    let _: () = query(new, redis::cmd("SET").arg("after").arg("failover"))
        .await
        .unwrap();
    eprintln!(
        "sentinel: up in {up:?}, new primary named {failover:?} after the kill, \
         total {:?}",
        started.elapsed()
    );
}

/// A 3-primary cluster reports ok with all 16384 slots covered, and keys
/// with different hash tags land on every primary while the keys of one
/// lock name (one hash tag) land together.
#[tokio::test]
async fn cluster_covers_every_slot_and_spreads_hash_tags_over_the_primaries() {
    let started = Instant::now();
    let cluster = Cluster::start(3, 0).await;
    let up = started.elapsed();
    let primaries = cluster.primaries().await;
    assert_eq!(primaries.len(), 3);
    assert_eq!(cluster.seed_urls().len(), 3);
    for addr in cluster.node_addrs() {
        let info: String = query(addr, redis::cmd("CLUSTER").arg("INFO"))
            .await
            .unwrap();
        for line in [
            "cluster_state:ok",
            "cluster_slots_assigned:16384",
            "cluster_slots_ok:16384",
            "cluster_known_nodes:3",
            "cluster_size:3",
        ] {
            assert!(info.contains(line), "{addr}: no {line} in\n{info}");
        }
    }

    let mut holders = BTreeSet::new();
    for i in 0..12 {
        let lease = lease_key("test:", &format!("lock-{i}"));
        let queue = format!("{lease}:queue");
        let _: () = cluster
            .query(redis::cmd("SET").arg(&lease).arg(i))
            .await
            .unwrap();
        let _: () = cluster
            .query(redis::cmd("RPUSH").arg(&queue).arg("waiter"))
            .await
            .unwrap();
        let holder = cluster.holder_of(&lease).await.expect("stored somewhere");
        let slot = cluster.slot_of(&lease).await;
        assert_eq!(cluster.owner_of_slot(slot).await, holder);
        assert_eq!(
            cluster.slot_of(&queue).await,
            slot,
            "one hash tag, one slot"
        );
        assert_eq!(cluster.holder_of(&queue).await, Some(holder));
        holders.insert(holder);
    }
    assert_eq!(
        holders.into_iter().collect::<Vec<_>>(),
        primaries,
        "12 lock names reach every primary"
    );
    eprintln!("cluster: up in {up:?}, total {:?}", started.elapsed());
}

/// Migrating a key's slot to another primary moves the key: mid-way the old
/// owner answers ASK for keys it no longer has, and afterwards MOVED for
/// the key, which the new owner serves.
#[tokio::test]
async fn slot_migration_moves_a_key_and_the_old_owner_answers_moved() {
    let started = Instant::now();
    let cluster = Cluster::start(3, 0).await;
    let key = lease_key("test:", "migrating");
    let _: () = cluster
        .query(redis::cmd("SET").arg(&key).arg("v"))
        .await
        .unwrap();
    let slot = cluster.slot_of(&key).await;
    let from = cluster.holder_of(&key).await.expect("stored");
    let to = *cluster
        .primaries()
        .await
        .iter()
        .find(|&&p| p != from)
        .unwrap();

    let migration = cluster.start_slot_migration(slot, to).await;
    assert_eq!(
        (migration.slot, migration.from, migration.to),
        (slot, from, to)
    );
    // The key is still on the old owner; another of its slot is not: ASK.
    let missing = format!("{key}:queue");
    let value: String = query(from, redis::cmd("GET").arg(&key)).await.unwrap();
    assert_eq!(value, "v");
    let ask = query::<Option<String>>(from, redis::cmd("GET").arg(&missing))
        .await
        .unwrap_err();
    assert_eq!(ask.kind(), ErrorKind::Server(ServerErrorKind::Ask), "{ask}");
    assert_eq!(ask.redirect_node(), Some((&*to.to_string(), slot)));
    // A write there through ASK goes to the new owner.
    let _: () = cluster
        .query(redis::cmd("SET").arg(&missing).arg("w"))
        .await
        .unwrap();
    assert_eq!(cluster.holder_of(&missing).await, Some(to));

    cluster.finish_slot_migration(&migration).await;
    assert_eq!(cluster.owner_of_slot(slot).await, to);
    assert_eq!(cluster.holder_of(&key).await, Some(to));
    let moved = query::<Option<String>>(from, redis::cmd("GET").arg(&key))
        .await
        .unwrap_err();
    assert_eq!(
        moved.kind(),
        ErrorKind::Server(ServerErrorKind::Moved),
        "{moved}"
    );
    assert_eq!(moved.redirect_node(), Some((&*to.to_string(), slot)));
    let value: String = query(to, redis::cmd("GET").arg(&key)).await.unwrap();
    assert_eq!(value, "v");
    let value: String = cluster
        .query(redis::cmd("GET").arg(&missing))
        .await
        .unwrap();
    assert_eq!(value, "w");
    cluster.wait_until_ok(Duration::from_secs(10)).await;
    eprintln!("migration: total {:?}", started.elapsed());
}

/// A killed primary with a replica is replaced by that replica, which then
/// serves its keys, and the cluster is ok again.
#[tokio::test]
async fn a_killed_cluster_primary_is_replaced_by_its_replica() {
    let started = Instant::now();
    let mut cluster = Cluster::start(3, 1).await;
    let up = started.elapsed();
    assert_eq!(cluster.node_addrs().len(), 6);
    assert_eq!(cluster.primaries().await.len(), 3);
    let key = lease_key("test:", "failing-over");
    let _: () = cluster
        .query(redis::cmd("SET").arg(&key).arg("kept"))
        .await
        .unwrap();
    let primary = cluster.holder_of(&key).await.expect("stored");
    let replicas = cluster.replicas_of(primary).await;
    assert_eq!(
        replicas.len(),
        1,
        "one replica each: {primary} in {:#?}",
        cluster.view().await
    );
    // Written again with WAIT on one connection: WAIT counts only the writes
    // of its own connection.
    let (acked,): (i64,) = query_pipe(
        primary,
        redis::pipe()
            .cmd("SET")
            .arg(&key)
            .arg("kept")
            .ignore()
            .cmd("WAIT")
            .arg(1)
            .arg(5_000),
    )
    .await
    .unwrap();
    assert_eq!(acked, 1, "the replica has the write");

    let killed = cluster.kill_node(cluster.index_of(primary));
    let kill = Instant::now();
    cluster.wait_until_ok(FAILOVER_LIMIT).await;
    let failover = kill.elapsed();
    let primaries = cluster.primaries().await;
    assert!(!primaries.contains(&killed));
    assert!(primaries.contains(&replicas[0]), "{primaries:?}");
    assert_eq!(cluster.holder_of(&key).await, Some(replicas[0]));
    let value: String = cluster.query(redis::cmd("GET").arg(&key)).await.unwrap();
    assert_eq!(value, "kept");
    eprintln!(
        "cluster failover: up in {up:?}, ok again {failover:?} after the kill, total {:?}",
        started.elapsed()
    );
}
