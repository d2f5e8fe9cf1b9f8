//! Coordination beyond a plain mutex: lock-delay after an involuntary loss,
//! CheckFence, and operator revocation.

use leasehold_testkit as common;

use std::time::{Duration, Instant};

use common::{sample, scrape, Broker, RedisServer};
use leasehold_client::{AcquireOptions, Client, ClientError, LossReason};
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::Command,
};

fn opts(ttl_ms: u64) -> AcquireOptions {
    AcquireOptions::new()
        .ttl(Duration::from_millis(ttl_ms))
        .holder("test")
}

/// A holder paused past its TTL: with a lock-delay, nobody gets the lock
/// until the delay after the expiry has also passed.
#[tokio::test]
async fn lock_delay_keeps_the_lock_after_a_paused_holder() {
    let redis = RedisServer::start();
    let broker = Broker::start(&redis.url()).await;
    let mut holder = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args([
            "hold",
            "--lock",
            "delayed",
            "--ttl",
            "1s",
            "--lock-delay",
            "2s",
        ])
        .env("LEASEHOLD_BROKER", broker.url())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut out = BufReader::new(holder.stdout.take().unwrap()).lines();
    let granted = out.next_line().await.unwrap().unwrap();
    assert!(granted.starts_with("granted"), "{granted}");
    let paused = Instant::now();
    // SAFETY: kill() has no memory-safety preconditions.
    unsafe { libc::kill(holder.id().unwrap().cast_signed(), libc::SIGSTOP) };

    let client = Client::connect(broker.url()).await.unwrap();
    let next = client
        .acquire("delayed", opts(1_000).wait(Duration::from_secs(10)))
        .await
        .expect("granted once the delay is over");
    let waited = paused.elapsed();
    assert!(
        waited >= Duration::from_millis(2_900),
        "granted {waited:?} after the pause: TTL 1 s + delay 2 s"
    );
    assert!(
        waited < Duration::from_millis(5_000),
        "granted only {waited:?} after the pause"
    );
    next.release().await.unwrap();
    holder.start_kill().unwrap();
}

/// A clean release starts no lock-delay.
#[tokio::test]
async fn a_release_has_no_lock_delay() {
    let broker = Broker::start("memory").await;
    let client = Client::connect(broker.url()).await.unwrap();
    let lease = client
        .acquire("tidy", opts(5_000).lock_delay(Duration::from_secs(30)))
        .await
        .unwrap();
    lease.release().await.unwrap();
    let started = Instant::now();
    client
        .acquire("tidy", opts(1_000))
        .await
        .expect("free at once")
        .release()
        .await
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(1));
}

/// CheckFence: true for the current holder, false after its lease ends in
/// any way and for the fence of an earlier grant.
#[tokio::test]
async fn check_fence_follows_the_current_holder() {
    let redis = RedisServer::start();
    let broker = Broker::start_with(&redis.url(), |c| c.enable_revoke = true).await;
    let client = Client::connect(broker.url()).await.unwrap();

    let first = client.acquire("fenced", opts(10_000)).await.unwrap();
    let f1 = first.fence();
    assert_eq!(client.check_fence("fenced", f1).await.unwrap(), (true, f1));
    assert_eq!(
        client.check_fence("fenced", f1 - 1).await.unwrap(),
        (false, f1)
    );
    first.release().await.unwrap();
    assert_eq!(
        client.check_fence("fenced", f1).await.unwrap(),
        (false, 0),
        "after release"
    );

    let second = client.acquire("fenced", opts(10_000)).await.unwrap();
    let f2 = second.fence();
    assert_eq!(
        client.check_fence("fenced", f1).await.unwrap(),
        (false, f2),
        "after the next grant"
    );
    client.revoke("fenced").await.unwrap();
    assert_eq!(
        client.check_fence("fenced", f2).await.unwrap(),
        (false, 0),
        "after revoke"
    );
    drop(second);

    // After expiry (a lease nobody keeps alive: taken by the CLI).
    let output = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["acquire", "--lock", "fenced", "--ttl", "500ms"])
        .env("LEASEHOLD_BROKER", broker.url())
        .output()
        .await
        .unwrap();
    let text = String::from_utf8(output.stdout).unwrap();
    let f3: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("export LEASEHOLD_FENCE="))
        .expect("a fence")
        .parse()
        .unwrap();
    assert!(client.check_fence("fenced", f3).await.unwrap().0);
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(
        client.check_fence("fenced", f3).await.unwrap(),
        (false, 0),
        "after expiry"
    );
}

/// Revoke is refused unless enabled; enabled, it ends the lease, its holder
/// hears REVOKED, the next grant has a higher fence, and it is counted.
#[tokio::test]
async fn revoke_ends_a_lease_and_its_holder_is_told() {
    let locked_down = Broker::start("memory").await;
    let client = Client::connect(locked_down.url()).await.unwrap();
    let _held = client.acquire("x", opts(10_000)).await.unwrap();
    match client.revoke("x").await {
        Err(ClientError::Refused(s)) => {
            assert_eq!(s.code(), tonic::Code::PermissionDenied);
            assert_eq!(s.reason(), "PERMISSION_DENIED");
            assert!(s.message().contains("--enable-revoke"), "{}", s.message());
        }
        other => panic!("revoke allowed by default: {other:?}"),
    }

    let redis = RedisServer::start();
    let broker = Broker::start_with(&redis.url(), |c| c.enable_revoke = true).await;
    let holder = Client::connect(broker.url()).await.unwrap();
    let lease = holder.acquire("job", opts(3_000)).await.unwrap();
    let operator = Client::connect(broker.url()).await.unwrap();
    assert_eq!(operator.revoke("job").await.unwrap(), lease.fence());
    let reason = tokio::time::timeout(Duration::from_secs(3), lease.lost())
        .await
        .expect("told within a heartbeat");
    assert_eq!(reason, LossReason::Revoked);
    let next = operator
        .acquire("job", opts(3_000))
        .await
        .expect("free after revoke");
    assert!(next.fence() > lease.fence());
    match operator.revoke("nothing-here").await {
        Err(ClientError::Refused(s)) => assert_eq!(s.code(), tonic::Code::NotFound),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        sample(
            &scrape(broker.metrics_addr).await,
            "lease_lost_total{reason=\"revoked\"}"
        ),
        1.0
    );
}

/// A semaphore with limit 3 and 10 contenders over two brokers: never more
/// than 3 holders at once, and every contender gets its turns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_never_has_more_holders_than_its_limit() {
    use std::sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    };
    let redis = RedisServer::start();
    let brokers = [
        Broker::start(&redis.url()).await,
        Broker::start(&redis.url()).await,
    ];
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..10 {
        let client = Client::connect(brokers[i % 2].url()).await.unwrap();
        let (inside, most) = (Arc::clone(&inside), Arc::clone(&most));
        tasks.push(tokio::spawn(async move {
            let mut fences = Vec::new();
            for _ in 0..5 {
                let permit = client
                    .acquire("pool", opts(10_000).limit(3).wait(Duration::from_secs(30)))
                    .await
                    .unwrap_or_else(|e| panic!("contender {i}: {e}"));
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                fences.push(permit.fence());
                tokio::time::sleep(Duration::from_millis(5)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                permit.release().await.unwrap();
            }
            fences
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(
            tokio::time::timeout(Duration::from_secs(60), task)
                .await
                .expect("no contender starves")
                .unwrap(),
        );
    }
    assert!(
        most.load(Ordering::SeqCst) <= 3,
        "{} holders at once",
        most.load(Ordering::SeqCst)
    );
    assert_eq!(
        most.load(Ordering::SeqCst),
        3,
        "the semaphore never had 3 holders: not exercised"
    );
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 50, "every permit has its own fence");
}
