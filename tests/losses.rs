//! `lease_lost_total` counts exactly the leases that ended without their
//! holder's consent (expired, revoked, lost by the store, taken over after
//! expiry), once each, on whichever replica learns it first; and nothing
//! else: not a release, a second release, a heartbeat that crossed a
//! release, a stream closed after a release, nor a stranger's wrong token.
//!
//! Two broker replicas share one real Redis in every test, and the counts
//! are summed over both. Where a test asserts that *nothing* was counted, it
//! first waits past the moment a wrong count would have happened (a broken
//! stream's leases are looked at 250 ms after their TTL): there is no event
//! for "nothing happened".

use leasehold_testkit as common;

use std::{
    process::Stdio,
    time::{Duration, Instant},
};

use common::{eventually, scrape, Broker, RedisServer};
use leasehold_client::{AcquireOptions, Client, LossReason};
use leasehold_server::proto::{ReleaseRequest, RenewRequest};
use tonic::Code;

/// Two brokers on one Redis, `Revoke` allowed.
async fn two_brokers(redis: &RedisServer) -> [Broker; 2] {
    let url = redis.url();
    [
        Broker::start_with(&url, |c| c.enable_revoke = true).await,
        Broker::start_with(&url, |c| c.enable_revoke = true).await,
    ]
}

/// `lease_lost_total` by reason, and acquired / released, summed over the
/// brokers.
#[derive(Debug, Default, PartialEq)]
struct Counts {
    expired: f64,
    not_owner: f64,
    store_lost: f64,
    revoked: f64,
    acquired: f64,
    released: f64,
}

impl Counts {
    fn lost(&self) -> f64 {
        self.expired + self.not_owner + self.store_lost + self.revoked
    }
}

async fn counts(brokers: &[Broker]) -> Counts {
    let mut c = Counts::default();
    for broker in brokers {
        let s = scrape(broker.metrics_addr).await;
        let lost =
            |reason: &str| common::sample(&s, &format!("lease_lost_total{{reason=\"{reason}\"}}"));
        c.expired += lost("expired");
        c.not_owner += lost("not_owner");
        c.store_lost += lost("store_lost");
        c.revoked += lost("revoked");
        c.acquired += common::sample(&s, "lease_acquired_total");
        c.released += common::sample(&s, "leasehold_lease_released_total");
    }
    c
}

/// Longer than any broken stream's look at its leases (TTL + 250 ms) could
/// take on a loaded machine.
const SETTLE: Duration = Duration::from_millis(2_500);

/// 100 clean `leasehold run` cycles (each long enough for heartbeats, and
/// ending with a release and the process's exit, which drops its stream)
/// count 100 grants, 100 releases and no loss.
#[tokio::test]
async fn clean_runs_count_no_loss() {
    let redis = RedisServer::start();
    let brokers = two_brokers(&redis).await;
    for round in 0..10 {
        let runs: Vec<_> = (0..10)
            .map(|i| {
                let broker = &brokers[(round + i) % 2];
                tokio::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
                    .env("LEASEHOLD_BROKER", broker.url())
                    .args(["run", "--ttl", "1500ms", "--lock", &format!("clean/{i}")])
                    .args(["--", "sleep", "0.6"])
                    .stdout(Stdio::null())
                    .kill_on_drop(true)
                    .status()
            })
            .collect();
        for status in futures_util::future::join_all(runs).await {
            assert!(status.expect("run").success(), "a clean run failed");
        }
    }
    tokio::time::sleep(SETTLE).await;
    let c = counts(&brokers).await;
    println!("100 clean runs: {c:?}");
    assert_eq!(
        (c.acquired, c.released, c.lost()),
        (100.0, 100.0, 0.0),
        "{c:?}"
    );
}

/// Short leases (TTL 600 ms, heartbeats every 200 ms) taken and released as
/// fast as four clients on two brokers can, on three contended names: the
/// heartbeats that cross releases are not losses.
#[tokio::test]
async fn short_leases_taken_and_released_count_no_loss() {
    let redis = RedisServer::start();
    let brokers = two_brokers(&redis).await;
    let until = Instant::now() + Duration::from_secs(5);
    let workers = (0..4).map(|w| {
        let url = brokers[w % 2].url();
        async move {
            let client = Client::connect(url).await.unwrap();
            let mut cycles = 0u32;
            while Instant::now() < until {
                let opts = AcquireOptions::new()
                    .ttl(Duration::from_millis(600))
                    .wait(Duration::from_secs(3))
                    .holder(format!("w{w}"));
                let lease = client
                    .acquire(&format!("busy/{}", cycles % 3), opts)
                    .await
                    .expect("acquire");
                // Across zero to two heartbeats.
                tokio::time::sleep(Duration::from_millis(u64::from(cycles % 5) * 100)).await;
                assert!(!lease.is_lost(), "a held lease was lost");
                lease.release().await.expect("release");
                cycles += 1;
            }
            cycles
        }
    });
    let cycles: u32 = futures_util::future::join_all(workers)
        .await
        .into_iter()
        .sum();
    assert!(cycles > 20, "only {cycles} cycles");
    tokio::time::sleep(SETTLE).await;
    let c = counts(&brokers).await;
    println!("short leases: {cycles} cycles over 4 clients and 2 brokers: {c:?}");
    assert_eq!(c.lost(), 0.0, "{c:?}");
    assert_eq!(c.acquired, f64::from(cycles), "{c:?}");
    assert_eq!(c.released, f64::from(cycles), "{c:?}");
}

/// Starts `leasehold run --ttl 1s --lock NAME -- sleep 60` on `broker` and
/// waits until its lease was renewed over its KeepAlive stream (the broker
/// counted a heartbeat).
async fn holder(broker: &Broker, name: &str) -> tokio::process::Child {
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .env("LEASEHOLD_BROKER", broker.url())
        .args(["run", "--ttl", "1s", "--lock", name, "--", "sleep", "60"])
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn run");
    eventually(
        Duration::from_secs(10),
        "a renewal of the lease",
        || async {
            let s = scrape(broker.metrics_addr).await;
            common::sample(&s, "heartbeat_latency_seconds_count") > 0.0
        },
    )
    .await;
    child
}

/// A client on `broker` waiting (up to 10 s) for `name`, once it is in line.
async fn queued(
    broker: &Broker,
    name: &str,
) -> tokio::task::JoinHandle<Result<leasehold_client::Lease, leasehold_client::ClientError>> {
    let waiter = Client::connect(broker.url()).await.unwrap();
    let waiting = tokio::spawn({
        let (waiter, name) = (waiter.clone(), name.to_owned());
        async move {
            waiter
                .acquire(&name, AcquireOptions::new().wait(Duration::from_secs(10)))
                .await
        }
    });
    eventually(Duration::from_secs(5), "the waiter queued", || async {
        waiter.describe(name).await.is_ok_and(|d| d.waiters == 1)
    })
    .await;
    waiting
}

/// A holder killed with SIGKILL, nobody waiting: its stream breaks, its
/// lease expires, and exactly one loss is counted, `expired`, by the broker
/// of the broken stream.
#[tokio::test]
async fn a_killed_holder_is_one_expiry() {
    let redis = RedisServer::start();
    let brokers = two_brokers(&redis).await;
    let mut run = holder(&brokers[0], "victim").await;
    run.start_kill().expect("SIGKILL");
    eventually(Duration::from_secs(5), "the loss counted", || async {
        counts(&brokers).await.expired == 1.0
    })
    .await;
    tokio::time::sleep(SETTLE).await;
    let c = counts(&brokers).await;
    assert_eq!((c.expired, c.lost()), (1.0, 1.0), "counted once: {c:?}");
}

/// A holder killed with SIGKILL while a client waits on the other broker:
/// the waiter takes the lock at the expiry, before anyone else learnt of
/// the loss; exactly one loss is counted, `not_owner` (taken over after
/// expiry), by the waiter's broker.
#[tokio::test]
async fn a_killed_holder_taken_over_is_one_loss() {
    let redis = RedisServer::start();
    let brokers = two_brokers(&redis).await;
    let mut run = holder(&brokers[0], "victim").await;
    let waiting = queued(&brokers[1], "victim").await;
    run.start_kill().expect("SIGKILL");
    let lease = waiting.await.unwrap().expect("granted after the expiry");
    tokio::time::sleep(SETTLE).await;
    let c = counts(&brokers).await;
    assert_eq!((c.not_owner, c.lost()), (1.0, 1.0), "counted once: {c:?}");
    lease.release().await.unwrap();
}

/// A revoke is one loss, `revoked`; its holder hears REVOKED even though the
/// lock was granted to a waiter at once.
#[tokio::test]
async fn a_revoke_is_one_loss_told_as_revoked_after_a_new_grant() {
    let redis = RedisServer::start();
    let brokers = two_brokers(&redis).await;
    let holder = Client::connect(brokers[0].url()).await.unwrap();
    let lease = holder
        .acquire("revoked", AcquireOptions::new().ttl(Duration::from_secs(3)))
        .await
        .unwrap();
    let waiting = queued(&brokers[1], "revoked").await;
    let other = Client::connect(brokers[1].url()).await.unwrap();
    other.revoke("revoked").await.expect("revoke");
    let next = waiting.await.unwrap().expect("the waiter's grant");
    let reason = tokio::time::timeout(Duration::from_secs(5), lease.lost())
        .await
        .expect("the holder heard");
    assert_eq!(reason, LossReason::Revoked);
    tokio::time::sleep(SETTLE).await;
    let c = counts(&brokers).await;
    assert_eq!((c.revoked, c.lost()), (1.0, 1.0), "{c:?}");
    next.release().await.unwrap();
}

/// A stranger's well-formed wrong token is refused and touches nothing; a
/// second release with the right token succeeds again (its first did the
/// work); none of it is a loss, and the release is counted once.
#[tokio::test]
async fn strangers_and_repeated_releases_are_not_losses() {
    let redis = RedisServer::start();
    let brokers = two_brokers(&redis).await;
    let mut a = brokers[0].client().await;
    let mut b = brokers[1].client().await;
    let lease = common::must_acquire(&mut a, "mine", 5_000).await;
    let stranger = "0".repeat(32);
    let renew = |token: &str| RenewRequest {
        name: "mine".into(),
        owner_token: token.into(),
        ttl_ms: 0,
    };
    let release = |token: &str| ReleaseRequest {
        name: "mine".into(),
        owner_token: token.into(),
    };
    let refused = b.renew(renew(&stranger)).await.unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    let refused = b.release(release(&stranger)).await.unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    a.renew(renew(&lease.owner_token))
        .await
        .expect("still the holder's");
    a.release(release(&lease.owner_token))
        .await
        .expect("release");
    b.release(release(&lease.owner_token))
        .await
        .expect("a repeated release reports the first one's work");
    let after = a.renew(renew(&lease.owner_token)).await.unwrap_err();
    assert_eq!(after.code(), Code::NotFound, "{after:?}");
    tokio::time::sleep(SETTLE).await;
    let c = counts(&brokers).await;
    assert_eq!((c.released, c.lost()), (1.0, 0.0), "{c:?}");
}
