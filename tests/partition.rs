//! Network partitions between a broker and its store: the broker runs in a
//! network namespace of the test's own (`common::netns`), and nftables rules
//! there make its store connections fall silent, packets dropped both ways,
//! while its clients still reach it. The partitioned broker answers
//! UNAVAILABLE within its store timeout, a broker on the other side of the
//! partition takes the name over once the lease has expired, with a higher
//! fence, and the partitioned one serves again once the partition heals.
//!
//! Needs root (network namespaces); without it each test prints
//! `skipped: ...` and returns.

use leasehold_testkit as common;

use std::{
    io::{ErrorKind, Read, Write},
    net::{IpAddr, SocketAddr, TcpListener, TcpStream},
    os::unix::fs::MetadataExt,
    time::{Duration, Instant},
};

use common::{acquire_req, await_health, must_acquire, BrokerProcess, NetNs, RedisServer};
use leasehold_server::proto::RenewRequest;
use tonic::Code;
use tonic_health::pb::{
    health_check_response::ServingStatus, health_client::HealthClient, HealthCheckRequest,
};

/// The partitioned broker's `--store-timeout`: how long a store call may
/// take before it fails UNAVAILABLE.
const STORE_TIMEOUT: Duration = Duration::from_secs(1);

/// What a loaded 2-core machine may add to the store timeout before an
/// UNAVAILABLE arrives (scheduling, a retry on the broken connection).
const SLACK: Duration = Duration::from_secs(5);

/// How long a connect through a partition is given before its timeout
/// counts as the partition holding: over the pair, a connect that gets
/// through takes well under a millisecond.
const CUT: Duration = Duration::from_secs(1);

/// How long a connect or read that must get through may take: TCP's
/// retransmission backoff after a partition of seconds, on a loaded machine.
const THROUGH: Duration = Duration::from_secs(30);

/// A namespace, or `None` after saying, on stderr past the test harness'
/// capture, why the test is skipped: only when creating one is not
/// permitted (not root).
fn namespace() -> Option<NetNs> {
    match NetNs::new() {
        Ok(ns) => Some(ns),
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "skipped: {e}");
            None
        }
    }
}

/// Connecting from inside to `addr` fails with a timeout (the SYN vanished:
/// not refused, not unreachable).
fn cut_off(ns: &NetNs, addr: SocketAddr) {
    let err = ns
        .connect_from_inside(addr, CUT)
        .expect_err("connected through the partition");
    assert_eq!(err.kind(), ErrorKind::TimedOut, "{err}");
}

/// The namespace's own mechanics, with plain TCP: distinct names and
/// subnets per instance; `partition` silences connections from inside,
/// new and open, while connections from outside still work; `heal`
/// restores the silenced ones; `partition_from` cuts one peer only; drop
/// removes the namespace and the pair.
#[test]
fn partitions_silence_connections_from_inside_and_heal() {
    let Some(ns) = namespace() else { return };
    let other = NetNs::new().expect("a second namespace");
    assert_ne!(ns.name(), other.name());
    assert_ne!(ns.host_ip(), other.host_ip());
    assert_ne!(ns.ns_ip(), other.ns_ip());

    let host = TcpListener::bind((ns.host_ip(), 0)).unwrap();
    let peer = TcpListener::bind((ns.host_ip(), 0)).unwrap();
    let (host_addr, peer_addr) = (host.local_addr().unwrap(), peer.local_addr().unwrap());
    let inside = ns.enter(|| TcpListener::bind((ns.ns_ip(), 0)).unwrap());
    let inside_addr = inside.local_addr().unwrap();

    // One connection opened from inside before the partition.
    let mut open = ns.connect_from_inside(host_addr, THROUGH).unwrap();
    let (mut open_far, _) = host.accept().unwrap();

    ns.partition();
    cut_off(&ns, host_addr);
    cut_off(&ns, peer_addr);
    // The open connection carries nothing...
    open_far.write_all(b"during").unwrap();
    open.set_read_timeout(Some(CUT)).unwrap();
    let mut buf = [0u8; 6];
    let err = open.read(&mut buf).expect_err("data through the partition");
    assert!(
        matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        "{err}"
    );
    // ...but one opened from outside does, both ways.
    let mut client = TcpStream::connect_timeout(&inside_addr, THROUGH).unwrap();
    let (mut served, _) = inside.accept().unwrap();
    client.write_all(b"ping").unwrap();
    served.read_exact(&mut buf[..4]).unwrap();
    served.write_all(b"pong").unwrap();
    client.read_exact(&mut buf[..4]).unwrap();
    assert_eq!(&buf[..4], b"pong");

    ns.heal();
    ns.connect_from_inside(host_addr, THROUGH).unwrap();
    // What was written during the partition arrives when TCP retransmits.
    open.set_read_timeout(Some(THROUGH)).unwrap();
    open.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"during");

    ns.partition_from(peer_addr);
    cut_off(&ns, peer_addr);
    ns.connect_from_inside(host_addr, THROUGH).unwrap();
    ns.heal();
    ns.connect_from_inside(peer_addr, THROUGH).unwrap();
    // The other namespace never was partitioned.
    let other_host = TcpListener::bind((other.host_ip(), 0)).unwrap();
    other
        .connect_from_inside(other_host.local_addr().unwrap(), THROUGH)
        .unwrap();

    let (name, host_if) = (ns.name().to_owned(), format!("{}h", ns.name()));
    drop((open, open_far, client, served, inside));
    drop(ns);
    let list = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .unwrap();
    let list = String::from_utf8_lossy(&list.stdout);
    assert!(
        !list.split_whitespace().any(|n| n == name),
        "{name} left behind:\n{list}"
    );
    let link = std::process::Command::new("ip")
        .args(["link", "show", &host_if])
        .output()
        .unwrap();
    assert!(!link.status.success(), "{host_if} left behind");
}

/// The broker's health stream (a `grpc.health.v1` Watch).
async fn watch_health(
    broker: &BrokerProcess,
) -> tonic::Streaming<tonic_health::pb::HealthCheckResponse> {
    let channel = tonic::transport::Channel::from_shared(broker.url())
        .unwrap()
        .connect()
        .await
        .expect("connect for health");
    HealthClient::new(channel)
        .watch(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .expect("health watch")
        .into_inner()
}

/// Polls `what` through the broker until it succeeds, for at most `limit`:
/// after a heal, the broker's store connection comes back when TCP next
/// retransmits, a moment no event announces.
async fn until_served<T, F, Fut>(limit: Duration, what: &str, mut call: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, tonic::Status>>,
{
    let deadline = Instant::now() + limit;
    loop {
        match call().await {
            Ok(value) => return value,
            Err(status) => {
                assert_eq!(status.code(), Code::Unavailable, "{what}: {status:?}");
                assert!(
                    Instant::now() < deadline,
                    "{what}: still UNAVAILABLE {limit:?} after the heal: {status:?}"
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A broker in a namespace holds a lease on Redis; the namespace is cut off
/// from Redis. Its Acquire and Renew calls fail UNAVAILABLE within the
/// store timeout (plus slack) and its health turns NOT_SERVING, while a
/// broker outside still serves on the same Redis and is granted the name,
/// with a higher fence, once the lease's TTL has run out (not before: the
/// partitioned renewal never reached Redis). Healed, the partitioned broker
/// serves again, and the old holder's renewal is refused. Killed and
/// restarted, it comes back inside the namespace.
#[tokio::test]
async fn a_partitioned_broker_fails_unavailable_and_the_other_side_takes_over() {
    let started = Instant::now();
    let Some(ns) = namespace() else { return };
    let host: IpAddr = ns.host_ip().into();
    let redis = RedisServer::start_bound(&[host]);
    let store_timeout = format!("{}ms", STORE_TIMEOUT.as_millis());
    let mut inside = BrokerProcess::start_in(
        &ns,
        &redis.url_at(host),
        &[
            "--store-timeout",
            &store_timeout,
            "--health-interval",
            "200ms",
        ],
    )
    .await;
    let outside = BrokerProcess::start(&redis.url()).await;
    assert_eq!(inside.addr.ip(), IpAddr::from(ns.ns_ip()));
    let mut near = inside.client().await;
    let mut far = outside.client().await;
    let mut health = watch_health(&inside).await;
    await_health(&mut health, ServingStatus::Serving).await;

    const TTL_MS: u64 = 3_000;
    let sent = Instant::now();
    let lease = must_acquire(&mut near, "partitioned", TTL_MS).await;

    ns.partition();
    cut_off(&ns, SocketAddr::new(host, redis.port()));
    for name in ["during-1", "during-2"] {
        let begun = Instant::now();
        let status = near
            .acquire(acquire_req(name, 10_000, "near", 0))
            .await
            .expect_err("acquired through the partition");
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
        assert!(
            begun.elapsed() < STORE_TIMEOUT + SLACK,
            "{:?}",
            begun.elapsed()
        );
    }
    let begun = Instant::now();
    let status = near
        .renew(RenewRequest {
            name: "partitioned".into(),
            owner_token: lease.owner_token.clone(),
            ttl_ms: TTL_MS,
            ..Default::default()
        })
        .await
        .expect_err("renewed through the partition");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(
        begun.elapsed() < STORE_TIMEOUT + SLACK,
        "{:?}",
        begun.elapsed()
    );
    await_health(&mut health, ServingStatus::NotServing).await;

    // The other side: served at once, and granted the name when the lease
    // expires (a waiting Acquire is woken by the expiry).
    must_acquire(&mut far, "elsewhere", 10_000).await;
    let taken = far
        .acquire(acquire_req("partitioned", 10_000, "far", 30_000))
        .await
        .expect("the name after the lease's TTL")
        .into_inner()
        .lease
        .unwrap();
    let waited = sent.elapsed();
    assert!(
        taken.fence > lease.fence,
        "fence {} after {}",
        taken.fence,
        lease.fence
    );
    // Redis keeps expiry in whole milliseconds: a few of slack.
    assert!(
        waited + Duration::from_millis(5) >= Duration::from_millis(TTL_MS),
        "granted {waited:?} after the first grant was asked for, before its TTL"
    );
    assert!(
        waited < Duration::from_millis(TTL_MS) + SLACK + SLACK,
        "{waited:?}"
    );

    ns.heal();
    let healed = Instant::now();
    ns.connect_from_inside(SocketAddr::new(host, redis.port()), THROUGH)
        .expect("Redis from inside after the heal");
    until_served(THROUGH * 2, "acquire after the heal", || {
        let mut near = near.clone();
        async move {
            near.acquire(acquire_req("after-heal", 10_000, "near", 0))
                .await
        }
    })
    .await;
    let recovered = healed.elapsed();
    let stale = near
        .renew(RenewRequest {
            name: "partitioned".into(),
            owner_token: lease.owner_token.clone(),
            ttl_ms: TTL_MS,
            ..Default::default()
        })
        .await
        .expect_err("the old holder renewed the name taken over");
    // Its lease expired, and the grant that took the name over reported
    // that for its token: "no lease" (not "another owner"), counted once.
    assert_eq!(stale.code(), Code::NotFound, "{stale:?}");

    // The broker is the child (`ip netns exec` execs it), inside the
    // namespace, before and after a restart.
    let in_namespace = |pid: u32| {
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
        assert_eq!(exe, common::leasehold_binary().canonicalize().unwrap());
        let net = std::fs::metadata(format!("/proc/{pid}/ns/net")).unwrap();
        let named = std::fs::metadata(format!("/run/netns/{}", ns.name())).unwrap();
        assert_eq!((net.dev(), net.ino()), (named.dev(), named.ino()));
    };
    in_namespace(inside.pid());
    inside.restart().await;
    in_namespace(inside.pid());
    let mut near = inside.client().await;
    must_acquire(&mut near, "after-restart", 10_000).await;

    let _ = writeln!(
        std::io::stderr(),
        "partition test: served again {recovered:?} after the heal; {:?} in all",
        started.elapsed()
    );
}
