//! Redis Sentinel (issue 9): a broker on `redis+sentinel://` finds the
//! primary through the sentinels, and when the primary is killed during a
//! contended run it moves to the new primary by itself. Meanwhile calls fail
//! with UNAVAILABLE (never a wrong answer), no two clients hold a lock at
//! once, fences keep rising, and, with `--replica-acks 1`, a grant
//! acknowledged before the failover survives it. Against a real primary, two
//! replicas and three sentinels on loopback ports.

use leasehold_testkit as common;

use std::time::Duration;

use common::{acquire_req, contract::Run, topology::Sentinel, Broker};
use leasehold_server::proto::RenewRequest;
use tokio::time::Instant;
use tonic::Code;

/// Killing the primary during a contended run: calls fail with UNAVAILABLE
/// for a while, then the broker serves from the new primary by itself;
/// mutual exclusion and fence order hold throughout, and a lease granted
/// (with --replica-acks 1) before the kill is still there after it.
#[tokio::test]
async fn the_broker_follows_a_sentinel_failover() {
    let mut topology = Sentinel::start().await;
    let sentinels: Vec<String> = topology
        .sentinel_addrs()
        .iter()
        .map(ToString::to_string)
        .collect();
    let url = format!(
        "redis+sentinel://{}/{}/0",
        sentinels.join(","),
        topology.master_name()
    );
    let broker = Broker::start_with(&url, |c| c.replica_acks = 1).await;
    let mut client = broker.client().await;
    // The broker asks the sentinels first: wait for its first grant.
    let deadline = Instant::now() + Duration::from_secs(20);
    let kept = loop {
        match client
            .acquire(acquire_req("kept", 60_000, "keeper", 0))
            .await
        {
            Ok(r) => break r.into_inner().lease.unwrap(),
            Err(s) if s.code() == Code::Unavailable && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(s) => panic!("no grant through Sentinel: {s:?}"),
        }
    };

    static LOCKS: [&str; 2] = ["a", "b"];
    let run = Run::start(&LOCKS, 4, || broker.client()).await;
    let killed_at = Instant::now();
    let old = topology.kill_primary().await;
    let new = topology.wait_for_new_primary(Duration::from_secs(30)).await;
    let promoted = killed_at.elapsed();
    assert_ne!(old, new);
    // The broker serves again: the first call that succeeds.
    let served = loop {
        let describe = leasehold_server::proto::DescribeRequest {
            name: "kept".into(),
            ..Default::default()
        };
        match client.describe(describe).await {
            Ok(_) => break killed_at.elapsed(),
            Err(s) => assert_eq!(s.code(), Code::Unavailable, "{s:?}"),
        }
        assert!(
            killed_at.elapsed() < Duration::from_secs(30),
            "never served again"
        );
    };
    // Grants resume by themselves on the new primary: count those asked
    // for after the kill (one in flight at the kill may still have been
    // answered by the old primary).
    let resumed = run.grants_after(None, killed_at, 20).await;
    run.stop_and_check().await;
    eprintln!(
        "sentinel failover, after the kill: new primary named {} ms, broker serving {} ms, \
         first contended grant asked for after the kill {} ms",
        promoted.as_millis(),
        served.as_millis(),
        (resumed - killed_at).as_millis()
    );

    // The lease acknowledged by a replica before the kill survived it.
    let d = client
        .describe(leasehold_server::proto::DescribeRequest {
            name: "kept".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(d.held && d.fence == kept.fence, "{d:?}");
    client
        .renew(RenewRequest {
            name: "kept".into(),
            owner_token: kept.owner_token,
            ttl_ms: 0,
            ..Default::default()
        })
        .await
        .expect("the kept lease renews on the new primary");
}
