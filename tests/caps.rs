//! Abuse limits (issue 8, point 3): a connection or a tenant past its cap on
//! leases, waiters, streams or requests per second gets RESOURCE_EXHAUSTED
//! naming the cap's flag, while bystanders (other connections, other
//! tenants) keep their leases and carry on. Connection-level bounds:
//! `--max-connections`, `--handshake-timeout`, `--max-message-size`.

use leasehold_testkit as common;

use std::{path::PathBuf, time::Duration};

use common::{acquire_req, certs::scratch, eventually, must_acquire, sample, scrape, Broker};
use leasehold_client::{Broker as Grpc, Credentials};
use leasehold_server::{
    auth::{generate_token, token_credential},
    proto::{
        leasehold_service_client::LeaseholdServiceClient, DescribeRequest, KeepAliveRequest, Lease,
        ObserveRequest, RenewRequest,
    },
};
use tokio::io::AsyncReadExt;
use tonic::{transport::Channel, Code};

fn describe(name: &str) -> DescribeRequest {
    DescribeRequest {
        name: name.into(),
        ..Default::default()
    }
}

/// Asserts RESOURCE_EXHAUSTED naming `flag`.
fn exhausted<T: std::fmt::Debug>(result: Result<T, tonic::Status>, flag: &str) {
    match result {
        Err(s) if s.code() == Code::ResourceExhausted && s.message().contains(flag) => {}
        other => panic!("expected RESOURCE_EXHAUSTED naming {flag}, got {other:?}"),
    }
}

/// The bystander's lease is still held, with its fence, and renews.
async fn intact(client: &mut LeaseholdServiceClient<Channel>, lease: &Lease) {
    let d = client
        .describe(describe(&lease.name))
        .await
        .unwrap()
        .into_inner();
    assert!(d.held && d.fence == lease.fence, "bystander's lease: {d:?}");
    client
        .renew(RenewRequest {
            name: lease.name.clone(),
            owner_token: lease.owner_token.clone(),
            ttl_ms: 0,
            ..Default::default()
        })
        .await
        .expect("the bystander renews");
}

/// Two tenants, `a` and `b`, with tokens.
struct Tenants {
    a: String,
    b: String,
    file: PathBuf,
}

fn tenants(test: &str) -> Tenants {
    let (a, b) = (generate_token().unwrap(), generate_token().unwrap());
    let file = scratch(test).join("auth");
    std::fs::write(
        &file,
        format!(
            "a use {}\nb use {}\n",
            token_credential(&a),
            token_credential(&b)
        ),
    )
    .unwrap();
    Tenants { a, b, file }
}

async fn as_(broker: &Broker, token: &str) -> Grpc {
    Credentials::bearer(Some(token))
        .unwrap()
        .client(broker.channel().await)
}

/// A connection holding `--conn-max-leases` leases cannot take another until
/// it releases one; another connection can.
#[tokio::test]
async fn leases_are_capped_per_connection() {
    let broker = Broker::start_with("memory", |c| c.limits.conn_max_leases = 2).await;
    let mut greedy = broker.client().await;
    let mut bystander = broker.client().await;
    let mine = must_acquire(&mut bystander, "bystander", 30_000).await;
    let first = must_acquire(&mut greedy, "g1", 30_000).await;
    must_acquire(&mut greedy, "g2", 30_000).await;
    exhausted(
        greedy.acquire(acquire_req("g3", 30_000, "g", 0)).await,
        "--conn-max-leases",
    );
    intact(&mut bystander, &mine).await;
    must_acquire(&mut bystander, "b2", 30_000).await;
    greedy
        .release(leasehold_server::proto::ReleaseRequest {
            name: first.name,
            owner_token: first.owner_token,
        })
        .await
        .unwrap();
    must_acquire(&mut greedy, "g3", 30_000).await;
    let text = scrape(broker.metrics_addr).await;
    assert_eq!(
        sample(&text, r#"leasehold_rejected_total{reason="cap"}"#),
        1.0
    );
}

/// A tenant holding `--tenant-max-leases` leases, over any number of
/// connections, cannot take another; another tenant can.
#[tokio::test]
async fn leases_are_capped_per_tenant() {
    let t = tenants("cap-tenant-leases");
    let file = t.file.clone();
    let broker = Broker::start_with("memory", move |c| {
        c.auth_file = Some(file);
        c.limits.tenant_max_leases = 2;
    })
    .await;
    let (mut a1, mut a2) = (as_(&broker, &t.a).await, as_(&broker, &t.a).await);
    let mut b = as_(&broker, &t.b).await;
    let theirs = b
        .acquire(acquire_req("x", 30_000, "b", 0))
        .await
        .unwrap()
        .into_inner()
        .lease
        .unwrap();
    a1.acquire(acquire_req("x", 30_000, "a", 0)).await.unwrap();
    a2.acquire(acquire_req("y", 30_000, "a", 0)).await.unwrap();
    exhausted(
        a1.acquire(acquire_req("z", 30_000, "a", 0)).await,
        "tenant 'a'",
    );
    exhausted(
        a2.acquire(acquire_req("z", 30_000, "a", 0)).await,
        "--tenant-max-leases",
    );
    b.acquire(acquire_req("y", 30_000, "b", 0)).await.unwrap();
    b.renew(RenewRequest {
        name: "x".into(),
        owner_token: theirs.owner_token,
        ttl_ms: 0,
        ..Default::default()
    })
    .await
    .expect("tenant b renews");
}

/// Past `--conn-max-waiters` (and `--tenant-max-waiters`), a waiting Acquire
/// is refused at once; waiters elsewhere queue, and the holder keeps its
/// lease.
#[tokio::test]
async fn waiters_are_capped_per_connection_and_tenant() {
    let t = tenants("cap-waiters");
    let file = t.file.clone();
    let broker = Broker::start_with("memory", move |c| {
        c.auth_file = Some(file);
        c.limits.conn_max_waiters = 1;
        c.limits.tenant_max_waiters = 2;
    })
    .await;
    let mut holder = as_(&broker, &t.b).await;
    let held = holder
        .acquire(acquire_req("busy", 30_000, "holder", 0))
        .await
        .unwrap()
        .into_inner()
        .lease
        .unwrap();
    // Tenant b: one waiter on this connection, then no more on it.
    let mut waiter = as_(&broker, &t.b).await;
    let parked = tokio::spawn({
        let mut waiter = waiter.clone();
        async move {
            waiter
                .acquire(acquire_req("busy", 30_000, "w1", 20_000))
                .await
        }
    });
    let mut observer = as_(&broker, &t.b).await;
    eventually(Duration::from_secs(10), "the waiter is queued", || {
        let mut observer = observer.clone();
        async move {
            observer
                .describe(describe("busy"))
                .await
                .map(|d| d.into_inner().local_waiters == 1)
                .unwrap_or(false)
        }
    })
    .await;
    exhausted(
        waiter
            .acquire(acquire_req("busy", 30_000, "w2", 20_000))
            .await,
        "--conn-max-waiters",
    );
    // A second connection of tenant b may wait, then b is at its cap.
    let second = tokio::spawn({
        let mut other = as_(&broker, &t.b).await;
        async move {
            other
                .acquire(acquire_req("busy", 30_000, "w3", 20_000))
                .await
        }
    });
    eventually(
        Duration::from_secs(10),
        "the second waiter is queued",
        || {
            let mut observer = observer.clone();
            async move {
                observer
                    .describe(describe("busy"))
                    .await
                    .map(|d| d.into_inner().local_waiters == 2)
                    .unwrap_or(false)
            }
        },
    )
    .await;
    exhausted(
        as_(&broker, &t.b)
            .await
            .acquire(acquire_req("busy", 30_000, "w4", 20_000))
            .await,
        "--tenant-max-waiters",
    );
    // Tenant a is not b: it may wait on its own lock.
    let mut a = as_(&broker, &t.a).await;
    a.acquire(acquire_req("busy", 30_000, "a", 0))
        .await
        .unwrap();
    let waited = a
        .acquire(acquire_req("busy", 30_000, "a2", 200))
        .await
        .unwrap_err();
    assert_eq!(
        waited.code(),
        Code::Aborted,
        "a waits under its own caps: {waited:?}"
    );
    // The holder still holds; releasing hands the lock to the first waiter.
    observer
        .renew(RenewRequest {
            name: "busy".into(),
            owner_token: held.owner_token.clone(),
            ttl_ms: 0,
            ..Default::default()
        })
        .await
        .expect("the holder renews");
    holder
        .release(leasehold_server::proto::ReleaseRequest {
            name: "busy".into(),
            owner_token: held.owner_token,
        })
        .await
        .unwrap();
    let granted = parked
        .await
        .unwrap()
        .expect("the first waiter gets the lock");
    assert_eq!(granted.into_inner().lease.unwrap().name, "busy");
    second.abort();
}

/// Past `--conn-max-streams`, another KeepAlive or Observe stream on the
/// connection is refused; the open stream and other connections carry on.
#[tokio::test]
async fn streams_are_capped_per_connection() {
    let broker = Broker::start_with("memory", |c| c.limits.conn_max_streams = 1).await;
    let mut client = broker.client().await;
    let lease = must_acquire(&mut client, "streamed", 30_000).await;
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let mut answers = client
        .keep_alive(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    exhausted(
        client
            .keep_alive(tokio_stream::iter(Vec::<KeepAliveRequest>::new()))
            .await
            .map(|_| ()),
        "--conn-max-streams",
    );
    exhausted(
        client
            .observe(ObserveRequest {
                election: "e".into(),
            })
            .await
            .map(|_| ()),
        "this connection",
    );
    // The open stream still renews.
    tx.send(KeepAliveRequest {
        seq: 7,
        leases: vec![leasehold_server::proto::LeaseRef {
            name: lease.name.clone(),
            owner_token: lease.owner_token.clone(),
            ttl_ms: 0,
            ..Default::default()
        }],
        ..Default::default()
    })
    .await
    .unwrap();
    let answer = answers.message().await.unwrap().unwrap();
    assert_eq!(answer.seq, 7);
    assert_eq!(
        answer.leases[0].state(),
        leasehold_server::proto::lease_status::State::Alive
    );
    // Another connection opens its own stream.
    let mut other = broker.client().await;
    other
        .observe(ObserveRequest {
            election: "e".into(),
        })
        .await
        .expect("another connection may observe");
    // Closing the stream frees its slot.
    drop(tx);
    while answers.message().await.ok().flatten().is_some() {}
    eventually(Duration::from_secs(10), "the slot is free again", || {
        let mut client = client.clone();
        async move {
            client
                .observe(ObserveRequest {
                    election: "e".into(),
                })
                .await
                .is_ok()
        }
    })
    .await;
}

/// A tenant past `--tenant-max-streams` cannot open another stream on any
/// connection; another tenant can.
#[tokio::test]
async fn streams_are_capped_per_tenant() {
    let t = tenants("cap-streams");
    let file = t.file.clone();
    let broker = Broker::start_with("memory", move |c| {
        c.auth_file = Some(file);
        c.limits.tenant_max_streams = 1;
    })
    .await;
    let _open = as_(&broker, &t.a)
        .await
        .observe(ObserveRequest {
            election: "e".into(),
        })
        .await
        .unwrap();
    exhausted(
        as_(&broker, &t.a)
            .await
            .observe(ObserveRequest {
                election: "e".into(),
            })
            .await
            .map(|_| ()),
        "--tenant-max-streams",
    );
    as_(&broker, &t.b)
        .await
        .observe(ObserveRequest {
            election: "e".into(),
        })
        .await
        .expect("tenant b observes");
}

/// A connection sending faster than `--conn-max-rate` is refused (with a
/// retry hint) after its one-second burst; another connection, and the
/// bystander's lease, are untouched. Same for a tenant's rate.
#[tokio::test]
async fn request_rates_are_capped_per_connection_and_tenant() {
    let t = tenants("cap-rate");
    let file = t.file.clone();
    let broker = Broker::start_with("memory", move |c| {
        c.auth_file = Some(file);
        c.limits.conn_max_rate = 5;
        c.limits.tenant_max_rate = 8;
    })
    .await;
    let mut bystander = as_(&broker, &t.b).await;
    let lease = bystander
        .acquire(acquire_req("steady", 30_000, "b", 0))
        .await
        .unwrap()
        .into_inner()
        .lease
        .unwrap();
    let mut flood = as_(&broker, &t.a).await;
    let mut refused = None;
    // A burst of 5 passes; well within a second, more are refused.
    for _ in 0..20 {
        if let Err(s) = flood.describe(describe("x")).await {
            refused = Some(s);
            break;
        }
    }
    let refused = refused.expect("the flood was never refused");
    assert_eq!(refused.code(), Code::ResourceExhausted);
    assert!(refused.message().contains("--conn-max-rate"), "{refused:?}");
    assert!(refused.message().contains("retry in"), "{refused:?}");
    // Tenant a's other connections share the tenant's rate (8/s, 5 used).
    let mut more = as_(&broker, &t.a).await;
    let mut tenant_refused = None;
    for _ in 0..20 {
        if let Err(s) = more.describe(describe("x")).await {
            tenant_refused = Some(s);
            break;
        }
    }
    let tenant_refused = tenant_refused.expect("the tenant was never refused");
    assert!(
        tenant_refused.message().contains("--tenant-max-rate"),
        "{tenant_refused:?}"
    );
    bystander
        .renew(RenewRequest {
            name: "steady".into(),
            owner_token: lease.owner_token,
            ttl_ms: 0,
            ..Default::default()
        })
        .await
        .expect("tenant b is not slowed by a's flood");
}

/// Past `--max-connections`, a new connection is closed at once (the client
/// sees UNAVAILABLE and can go elsewhere), counted; open connections carry
/// on, and a closed one frees its slot.
#[tokio::test]
async fn connections_are_capped() {
    let broker = Broker::start_with("memory", |c| c.max_connections = 2).await;
    let mut first = broker.client().await;
    let lease = must_acquire(&mut first, "held", 30_000).await;
    let second = broker.client().await;
    let mut third =
        LeaseholdServiceClient::new(Channel::from_shared(broker.url()).unwrap().connect_lazy());
    let refused = third.describe(describe("held")).await.unwrap_err();
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
    assert!(
        refused.message().contains("--max-connections"),
        "{refused:?}"
    );
    intact(&mut first, &lease).await;
    let text = scrape(broker.metrics_addr).await;
    assert!(sample(&text, r#"leasehold_rejected_total{reason="connections"}"#) >= 1.0);
    assert_eq!(sample(&text, "leasehold_connections"), 2.0);
    drop(second);
    eventually(Duration::from_secs(10), "a slot frees up", || {
        let url = broker.url();
        async move {
            let Ok(channel) = Channel::from_shared(url).unwrap().connect().await else {
                return false;
            };
            LeaseholdServiceClient::new(channel)
                .describe(describe("held"))
                .await
                .is_ok()
        }
    })
    .await;
}

/// A connection that sends nothing is closed at `--handshake-timeout`, and
/// holds nothing meanwhile; clients that talk are served.
#[tokio::test]
async fn silent_connections_are_closed_at_the_handshake_timeout() {
    let broker = Broker::start_with("memory", |c| {
        c.handshake_timeout = Duration::from_millis(300);
    })
    .await;
    let mut silent = tokio::net::TcpStream::connect(broker.addr).await.unwrap();
    let mut client = broker.client().await;
    must_acquire(&mut client, "talker", 30_000).await;
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(Duration::from_secs(20), silent.read(&mut buf))
        .await
        .expect("the silent connection was never closed");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
}

/// A message over `--max-message-size` is refused with a status naming the
/// limit; the connection and the broker carry on.
#[tokio::test]
async fn oversized_messages_are_refused() {
    let broker = Broker::start_with("memory", |c| c.max_message_size = 16 * 1024).await;
    let mut client = broker.client().await;
    let lease = must_acquire(&mut client, "small", 30_000).await;
    let huge = leasehold_server::proto::AcquireRequest {
        name: "big".into(),
        holder: "h".repeat(64 * 1024),
        ..Default::default()
    };
    let refused = client.acquire(huge).await.unwrap_err();
    assert!(
        refused.message().contains("16384"),
        "the limit is named: {refused:?}"
    );
    intact(&mut client, &lease).await;
}
