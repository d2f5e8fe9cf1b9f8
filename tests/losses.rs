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

/// 100 clean `leasehold run` cycles (each long enough for a heartbeat, and
/// ending with a release and the process's exit, which drops its stream)
/// count 100 grants, 100 releases and no loss. TTL 3 s: at 1.5 s, a
/// renewal answered more than about 550 ms late (ten `run`s starting at
/// once on a loaded machine, in a full run) made the guardian stop the
/// command, as it should for a lease about to be lost, and the clean run
/// was not clean.
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
                    .args(["run", "--ttl", "3s", "--lock", &format!("clean/{i}")])
                    .args(["--", "sleep", "1.2"])
                    .stdout(Stdio::null())
                    .kill_on_drop(true)
                    .status()
            })
            .collect();
        for status in futures_util::future::join_all(runs).await {
            assert!(status.expect("run").success(), "a clean run failed");
        }
    }
    // A broken stream's lease is looked at up to TTL + 250 ms after its
    // last renewal: 1.5 s more than SETTLE allows for at TTL 1.5 s.
    tokio::time::sleep(SETTLE + Duration::from_millis(1_500)).await;
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
        ..Default::default()
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

// Per token, not per name, on every store: a name is held by many leases
// over time (handoffs) and at once (semaphore permits), and each lease's
// end is counted, or not, for that lease alone.

/// `lease_lost_total` over every reason, on one broker.
async fn lost_on(broker: &Broker) -> f64 {
    let s = scrape(broker.metrics_addr).await;
    ["expired", "not_owner", "store_lost", "revoked"]
        .iter()
        .map(|r| common::sample(&s, &format!("lease_lost_total{{reason=\"{r}\"}}")))
        .sum()
}

/// `lease_lost_total{reason="expired"}` on one broker.
async fn expired_on(broker: &Broker) -> f64 {
    common::sample(
        &scrape(broker.metrics_addr).await,
        "lease_lost_total{reason=\"expired\"}",
    )
}

/// A grant of one permit of the semaphore `name` (limit 2).
async fn permit(
    client: &mut leasehold_server::proto::leasehold_service_client::LeaseholdServiceClient<
        tonic::transport::Channel,
    >,
    name: &str,
    ttl_ms: u64,
) -> leasehold_server::proto::Lease {
    client
        .acquire(leasehold_server::proto::AcquireRequest {
            limit: 2,
            ..common::acquire_req(name, ttl_ms, "test", 0)
        })
        .await
        .unwrap_or_else(|s| panic!("permit of {name}: {s:?}"))
        .into_inner()
        .lease
        .expect("a permit")
}

fn release_req(lease: &leasehold_server::proto::Lease) -> ReleaseRequest {
    ReleaseRequest {
        name: lease.name.clone(),
        owner_token: lease.owner_token.clone(),
    }
}

/// A heartbeat that crossed its own release is told "released" and is no
/// loss, even after the lock was granted to someone else and released by
/// them too (the store remembers each token's release, not only the
/// name's last one); the same for a semaphore permit after another permit
/// of the name was released.
#[tokio::test]
async fn a_heartbeat_that_crossed_its_release_is_no_loss_after_another_handoff() {
    use common::keepalive::{pair, Stream};
    use leasehold_server::proto::lease_status::State;
    for (store, broker, _server) in common::brokers_on_each_store().await {
        let mut client = broker.client().await;
        // One stream for the lock, one for the semaphore: each heartbeat
        // names what its holder believes it holds.
        let mut lock_stream = Stream::open(&mut client).await;
        let mut permit_stream = Stream::open(&mut client).await;

        let first = common::must_acquire(&mut client, "handed", 5_000).await;
        let beat = lock_stream.beat(&[pair(&first)]).await.unwrap();
        assert_eq!(beat.leases[0].state(), State::Alive, "{store}");
        client.release(release_req(&first)).await.unwrap();
        let second = common::must_acquire(&mut client, "handed", 5_000).await;
        client.release(release_req(&second)).await.unwrap();

        let one = permit(&mut client, "permits", 5_000).await;
        let other = permit(&mut client, "permits", 5_000).await;
        let beat = permit_stream.beat(&[pair(&one)]).await.unwrap();
        assert_eq!(beat.leases[0].state(), State::Alive, "{store}");
        client.release(release_req(&one)).await.unwrap();
        client.release(release_req(&other)).await.unwrap();

        // The heartbeats that crossed the releases.
        let late = [
            lock_stream.beat(&[pair(&first)]).await.unwrap(),
            permit_stream.beat(&[pair(&one)]).await.unwrap(),
        ];
        for status in late.iter().flat_map(|beat| &beat.leases) {
            assert_eq!(status.state(), State::Lost, "{store}: {status:?}");
            assert!(
                status.message.contains("released"),
                "{store}: told it was released: {status:?}"
            );
        }
        assert_eq!(lost_on(&broker).await, 0.0, "{store}: nothing was lost");
    }
}

/// An expired permit is one loss, whoever learns it first: its holder's
/// renewal, then a grant of the name and a second renewal, count it once.
#[tokio::test]
async fn an_expired_permit_is_one_loss() {
    for (store, broker, _server) in common::brokers_on_each_store().await {
        let mut client = broker.client().await;
        let mut lapsing = permit(&mut client, "lapsing", 500).await;
        let mut renew = RenewRequest {
            name: lapsing.name.clone(),
            owner_token: std::mem::take(&mut lapsing.owner_token),
            ttl_ms: 0,
            ..Default::default()
        };
        eventually(Duration::from_secs(5), "the permit to expire", || {
            let mut c = client.clone();
            async move {
                let d = c
                    .describe(leasehold_server::proto::DescribeRequest {
                        name: "lapsing".into(),
                        ..Default::default()
                    })
                    .await
                    .unwrap()
                    .into_inner();
                d.permits_held == 0
            }
        })
        .await;
        let refused = client.renew(renew.clone()).await.unwrap_err();
        assert_eq!(refused.code(), Code::NotFound, "{store}: {refused:?}");
        let next = permit(&mut client, "lapsing", 5_000).await;
        renew.ttl_ms = 1_000;
        let again = client.renew(renew).await.unwrap_err();
        assert_eq!(again.code(), Code::NotFound, "{store}: {again:?}");
        client.release(release_req(&next)).await.unwrap();
        assert_eq!(
            (expired_on(&broker).await, lost_on(&broker).await),
            (1.0, 1.0),
            "{store}: counted once"
        );
    }
}

/// A holder of two locks and two permits of one semaphore whose connection
/// dies (a SIGKILLed client): each of its four leases expires and is
/// counted once, by the broker of its broken stream.
#[tokio::test]
async fn a_killed_holder_of_locks_and_permits_is_one_expiry_each() {
    use common::keepalive::{pair, through_proxy, Stream};
    for (store, broker, _server) in common::brokers_on_each_store().await {
        let mut client = broker.client().await;
        let leases = [
            common::must_acquire(&mut client, "killed/a", 1_000).await,
            common::must_acquire(&mut client, "killed/b", 1_000).await,
            permit(&mut client, "killed/permits", 1_000).await,
            permit(&mut client, "killed/permits", 1_000).await,
        ];
        let (mut doomed, proxy) = through_proxy(&broker).await;
        let mut stream = Stream::open(&mut doomed).await;
        let pairs: Vec<_> = leases.iter().map(pair).collect();
        let beat = stream.beat(&pairs).await.unwrap();
        assert_eq!(beat.leases.len(), 4, "{store}");
        proxy.drop_connections();
        eventually(Duration::from_secs(10), "four expiries", || async {
            expired_on(&broker).await >= 4.0
        })
        .await;
        tokio::time::sleep(SETTLE).await;
        assert_eq!(
            (expired_on(&broker).await, lost_on(&broker).await),
            (4.0, 4.0),
            "{store}: one each"
        );
    }
}

/// A stream its client resets (RST_STREAM, as a cancelled call does) broke
/// as surely as one whose connection died: its lease runs out its TTL and
/// its expiry is counted once.
#[tokio::test]
async fn a_stream_reset_by_its_client_counts_its_expired_leases() {
    use common::keepalive::{pair, Stream};
    for (store, broker, _server) in common::brokers_on_each_store().await {
        let mut client = broker.client().await;
        let lease = common::must_acquire(&mut client, "reset", 1_000).await;
        let mut stream = Stream::open(&mut client).await;
        stream.beat(&[pair(&lease)]).await.unwrap();
        stream.reset();
        eventually(Duration::from_secs(10), "the expiry counted", || async {
            expired_on(&broker).await >= 1.0
        })
        .await;
        tokio::time::sleep(SETTLE).await;
        assert_eq!(
            (expired_on(&broker).await, lost_on(&broker).await),
            (1.0, 1.0),
            "{store}: once"
        );
    }
}

/// Two permits of one semaphore on one stream, one short, one long: the
/// short one expires between heartbeats and a grant of the name reports it;
/// the next heartbeat naming both learns the short one is gone, and it is
/// not counted again as lost by the store (the stream's record of the long
/// permit is not the short one's).
#[tokio::test]
async fn an_expired_permit_beside_a_live_one_is_one_loss() {
    use common::keepalive::{pair, Stream};
    use leasehold_server::proto::lease_status::State;
    for (store, broker, _server) in common::brokers_on_each_store().await {
        let mut client = broker.client().await;
        let short = permit(&mut client, "pair", 500).await;
        let long = permit(&mut client, "pair", 30_000).await;
        let mut stream = Stream::open(&mut client).await;
        let beat = stream.beat(&[pair(&short), pair(&long)]).await.unwrap();
        assert!(
            beat.leases.iter().all(|l| l.state() == State::Alive),
            "{store}: {beat:?}"
        );
        eventually(Duration::from_secs(5), "the short permit to expire", || {
            let mut c = client.clone();
            async move {
                c.describe(leasehold_server::proto::DescribeRequest {
                    name: "pair".into(),
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner()
                .permits_held
                    == 1
            }
        })
        .await;
        // A grant of the name finds the expired permit and reports it.
        let third = permit(&mut client, "pair", 30_000).await;
        assert_eq!(
            lost_on(&broker).await,
            1.0,
            "{store}: reported by the grant"
        );
        let beat = stream.beat(&[pair(&short), pair(&long)]).await.unwrap();
        assert_eq!(beat.leases[0].state(), State::Lost, "{store}: {beat:?}");
        assert_eq!(beat.leases[1].state(), State::Alive, "{store}: {beat:?}");
        assert_eq!(lost_on(&broker).await, 1.0, "{store}: counted once");
        for lease in [&long, &third] {
            client.release(release_req(lease)).await.unwrap();
        }
    }
}

/// `lease_lost_total{reason=...}` on one broker.
async fn lost_for(broker: &Broker, reason: &str) -> f64 {
    common::sample(
        &scrape(broker.metrics_addr).await,
        &format!("lease_lost_total{{reason=\"{reason}\"}}"),
    )
}

/// A lease kept alive on a KeepAlive stream (TTL 3 s) and also renewed by a
/// unary Renew with a shorter TTL (600 ms) expires before the stream
/// believes it can: a waiting client's grant takes the name and reports the
/// loss. The stream's next heartbeat hears LOST, EXPIRED (the store
/// remembers, for the token, that its expiry was reported), not
/// STORE_LOST; and the loss is counted once, by the grant (`not_owner`:
/// taken over after expiry), not again by the stream. For a lock and for a
/// semaphore permit, on every store.
#[tokio::test]
async fn a_lease_renewed_shorter_elsewhere_is_one_expiry_not_a_store_loss() {
    use common::keepalive::{pair, Stream};
    use leasehold_server::proto::{lease_status::State, LossReason as Reason};
    for (store, broker, _server) in common::brokers_on_each_store().await {
        for limit in [0, 2] {
            let what = format!("{store}, limit {limit}");
            let name = format!("shortened/{limit}");
            let mut client = broker.client().await;
            let acquire = |ttl_ms, wait_ms| leasehold_server::proto::AcquireRequest {
                limit,
                ..common::acquire_req(&name, ttl_ms, "test", wait_ms)
            };
            let lease = client.acquire(acquire(3_000, 0)).await.unwrap();
            let lease = lease.into_inner().lease.expect("granted");
            // A semaphore's other permit, held throughout: the waiter gets
            // the name only when the short one expires.
            let other = match limit {
                0 => None,
                _ => Some(client.acquire(acquire(30_000, 0)).await.unwrap()),
            };
            let mut stream = Stream::open(&mut client).await;
            let beat = stream.beat(&[pair(&lease)]).await.unwrap();
            assert_eq!(
                (beat.leases[0].state(), beat.leases[0].ttl_ms),
                (State::Alive, 3_000),
                "{what}"
            );
            let renewed = client
                .renew(RenewRequest {
                    name: name.clone(),
                    owner_token: lease.owner_token.clone(),
                    ttl_ms: 600,
                    ..Default::default()
                })
                .await
                .unwrap();
            assert_eq!(renewed.into_inner().ttl_ms, 600, "{what}");
            // Granted once the 600 ms lease has expired (the waiter's
            // attempt is due then), well within the stream's 3 s.
            let next = client
                .clone()
                .acquire(acquire(10_000, 10_000))
                .await
                .unwrap_or_else(|s| panic!("{what}: the waiter: {s:?}"))
                .into_inner()
                .lease
                .expect("granted");
            let beat = stream.beat(&[pair(&lease)]).await.unwrap();
            assert_eq!(
                (beat.leases[0].state(), beat.leases[0].reason()),
                (State::Lost, Reason::Expired),
                "{what}: {beat:?}"
            );
            let counted = (
                lost_for(&broker, "not_owner").await,
                lost_for(&broker, "store_lost").await,
                lost_on(&broker).await,
            );
            let before = if limit == 0 { 0.0 } else { 1.0 };
            assert_eq!(
                counted,
                (before + 1.0, 0.0, before + 1.0),
                "{what}: one loss, counted once (not_owner, store_lost, all)"
            );
            client.release(release_req(&next)).await.unwrap();
            if let Some(other) = other {
                let other = other.into_inner().lease.expect("granted");
                client.release(release_req(&other)).await.unwrap();
            }
        }
    }
}
