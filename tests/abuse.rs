//! Hostile input: garbage on the gRPC port, stalled half-open HTTP/2
//! connections, a heartbeat naming 100,000 leases, random bytes as names and
//! tokens. The broker answers with a clear status or closes the connection,
//! never panics, and a bystander's lease is untouched.

mod common;

use std::time::{Duration, Instant};

use common::{must_acquire, Broker, RedisServer};
use leasehold::proto::{
    leasehold_client::LeaseholdClient, DescribeRequest, KeepAliveRequest, LeaseRef, RenewRequest,
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};
use tonic::transport::Channel;

/// The bystander's lease is still there, with its fence, and renewable.
async fn bystander_intact(client: &mut LeaseholdClient<Channel>, fence: u64, token: &str) {
    let d = client
        .describe(DescribeRequest {
            name: "bystander".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(d.held && d.fence == fence, "{d:?}");
    client
        .renew(RenewRequest {
            name: "bystander".into(),
            owner_token: token.into(),
            ttl_ms: 0,
        })
        .await
        .expect("the bystander still owns its lease");
}

fn random_bytes(n: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; n];
    getrandom::fill(&mut bytes).unwrap();
    bytes
}

/// Random bytes instead of HTTP/2: the broker closes the connection and
/// goes on serving.
#[tokio::test]
async fn garbage_on_the_grpc_port_is_refused() {
    let redis = RedisServer::start();
    let broker = Broker::start(&redis.url()).await;
    let mut client = broker.client().await;
    let lease = must_acquire(&mut client, "bystander", 60_000).await;
    for size in [1, 24, 100, 4_096, 65_536] {
        let mut garbage = random_bytes(size);
        // Not the start of the HTTP/2 preface ("PRI * HTTP/2.0..."): one
        // 'P' (1 in 256 of the 1-byte runs) is a slow client, not garbage,
        // and waits for the handshake timeout (tested in tests/caps.rs).
        if garbage[0] == b'P' {
            garbage[0] = b'Q';
        }
        let mut stream = TcpStream::connect(broker.addr).await.unwrap();
        let _ = stream.write_all(&garbage).await;
        let mut sink = Vec::new();
        let closed =
            tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut sink)).await;
        assert!(
            closed.is_ok(),
            "a connection sending {size} garbage bytes was kept open"
        );
    }
    bystander_intact(&mut client, lease.fence, &lease.owner_token).await;
}

/// 200 connections that send half an HTTP/2 preface and stall do not keep
/// the broker from serving others promptly.
#[tokio::test]
async fn stalled_connections_do_not_starve_others() {
    let broker = Broker::start("memory").await;
    let mut client = broker.client().await;
    let lease = must_acquire(&mut client, "bystander", 60_000).await;
    let mut stalled = Vec::new();
    for _ in 0..200 {
        let mut stream = TcpStream::connect(broker.addr).await.unwrap();
        stream.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
        stalled.push(stream);
    }
    let started = Instant::now();
    let mut fresh = broker.client().await;
    must_acquire(&mut fresh, "still-served", 10_000).await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "served after {:?}",
        started.elapsed()
    );
    bystander_intact(&mut client, lease.fence, &lease.owner_token).await;
    drop(stalled);
}

/// A heartbeat naming 100,000 leases ends its stream with a clear status
/// (over the lease limit, or over the message size limit), nothing else.
#[tokio::test]
async fn a_heartbeat_naming_100k_leases_is_refused() {
    let redis = RedisServer::start();
    let broker = Broker::start(&redis.url()).await;
    let mut client = broker.client().await;
    let lease = must_acquire(&mut client, "bystander", 60_000).await;
    let leases: Vec<LeaseRef> = (0..100_000)
        .map(|i| LeaseRef {
            name: format!("flood-{i}"),
            owner_token: "0123456789abcdef0123456789abcdef".into(),
            ttl_ms: 0,
        })
        .collect();
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tx.send(KeepAliveRequest { seq: 1, leases }).await.unwrap();
    let outcome = match client
        .keep_alive(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
    {
        Ok(response) => response.into_inner().message().await.map(|_| ()),
        Err(status) => Err(status),
    };
    let status = outcome.expect_err("100,000 leases in one heartbeat were accepted");
    assert!(
        matches!(
            status.code(),
            tonic::Code::ResourceExhausted | tonic::Code::OutOfRange
        ),
        "{status:?}"
    );
    bystander_intact(&mut client, lease.fence, &lease.owner_token).await;
}

/// Random bytes as names, holders and tokens: each call gets a status (never
/// a dropped connection or a panic), and nothing else changes.
#[tokio::test]
async fn random_requests_get_statuses() {
    let broker = Broker::start("memory").await;
    let mut client = broker.client().await;
    let lease = must_acquire(&mut client, "bystander", 60_000).await;
    for round in 0..300 {
        let name = String::from_utf8_lossy(&random_bytes(round % 300)).into_owned();
        let token = String::from_utf8_lossy(&random_bytes(round % 40)).into_owned();
        let holder = String::from_utf8_lossy(&random_bytes(round % 270)).into_owned();
        let ttl_ms = u64::from_le_bytes(random_bytes(8).try_into().unwrap()) >> (round % 64);
        let _ = client
            .acquire(common::acquire_req(&name, ttl_ms, &holder, 0))
            .await;
        let _ = client
            .renew(RenewRequest {
                name: name.clone(),
                owner_token: token.clone(),
                ttl_ms,
            })
            .await;
        let _ = client
            .release(leasehold::proto::ReleaseRequest {
                name: "bystander".into(),
                owner_token: token,
            })
            .await;
        let _ = client
            .describe(DescribeRequest {
                name,
                ..Default::default()
            })
            .await;
    }
    bystander_intact(&mut client, lease.fence, &lease.owner_token).await;
}
