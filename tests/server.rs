//! What operators and tools see: gRPC reflection (so grpcurl needs no proto),
//! the health service, and Prometheus metrics that move with real traffic.

use leasehold_testkit as common;

use common::{acquire_req, must_acquire, sample, scrape, Broker, RedisServer};
use std::time::Duration;

use leasehold_server::proto::{ReleaseRequest, RenewRequest};
use tokio_stream::StreamExt;
use tonic_health::pb::{
    health_check_response::ServingStatus, health_client::HealthClient, HealthCheckRequest,
};
use tonic_reflection::pb::v1::{
    server_reflection_client::ServerReflectionClient, server_reflection_request::MessageRequest,
    server_reflection_response::MessageResponse, ServerReflectionRequest,
};

/// Reflection lists the Leasehold, health and reflection services and serves
/// the Leasehold proto, as grpcurl needs.
#[tokio::test]
async fn reflection_describes_the_api() {
    let broker = Broker::start("memory").await;
    let mut reflection = ServerReflectionClient::new(broker.channel().await);
    let requests = [
        MessageRequest::ListServices(String::new()),
        MessageRequest::FileContainingSymbol("leasehold.v1.LeaseholdService".into()),
    ]
    .map(|message| ServerReflectionRequest {
        host: String::new(),
        message_request: Some(message),
    });
    let mut responses = reflection
        .server_reflection_info(tokio_stream::iter(requests))
        .await
        .expect("reflection stream")
        .into_inner();

    match responses.next().await.unwrap().unwrap().message_response {
        Some(MessageResponse::ListServicesResponse(list)) => {
            let names: Vec<_> = list.service.into_iter().map(|s| s.name).collect();
            for want in [
                "leasehold.v1.LeaseholdService",
                "grpc.health.v1.Health",
                "grpc.reflection.v1.ServerReflection",
            ] {
                assert!(
                    names.iter().any(|n| n == want),
                    "{want} missing from {names:?}"
                );
            }
        }
        other => panic!("expected a service list, got {other:?}"),
    }
    match responses.next().await.unwrap().unwrap().message_response {
        Some(MessageResponse::FileDescriptorResponse(files)) => {
            assert!(!files.file_descriptor_proto.is_empty());
            let text = String::from_utf8_lossy(&files.file_descriptor_proto[0]).into_owned();
            assert!(
                text.contains("leasehold/v1/leasehold.proto") && text.contains("AcquireRequest")
            );
        }
        other => panic!("expected a file descriptor, got {other:?}"),
    }
}

/// The health service answers SERVING for the server and for the API.
#[tokio::test]
async fn health_is_serving_on_a_working_store() {
    let broker = Broker::start("memory").await;
    let mut health = HealthClient::new(broker.channel().await);
    for service in ["", "leasehold.v1.LeaseholdService"] {
        let mut watch = health
            .watch(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner();
        loop {
            let status = watch.next().await.expect("an update").unwrap().status();
            if status == ServingStatus::Serving {
                break;
            }
            assert_eq!(status, ServingStatus::ServiceUnknown, "service {service:?}");
        }
    }
}

/// The counters an operator watches move with real traffic.
#[tokio::test]
async fn metrics_move_with_traffic() {
    let redis = RedisServer::start();
    let broker = Broker::start(&redis.url()).await;
    let mut c = broker.client().await;
    let before = scrape(broker.metrics_addr).await;
    assert_eq!(sample(&before, "lease_acquired_total"), 0.0);
    assert_eq!(sample(&before, "lease_lost_total{reason=\"expired\"}"), 0.0);

    let a = must_acquire(&mut c, "m1", 10_000).await;
    let b = must_acquire(&mut c, "m2", 10_000).await;
    c.acquire(acquire_req("m1", 10_000, "other", 0))
        .await
        .unwrap_err(); // refused
    c.renew(RenewRequest {
        name: a.name.clone(),
        owner_token: a.owner_token.clone(),
        ttl_ms: 0,
        ..Default::default()
    })
    .await
    .unwrap();
    c.release(ReleaseRequest {
        name: a.name.clone(),
        owner_token: a.owner_token.clone(),
    })
    .await
    .unwrap();
    // Renewing a released lease is refused, and is no loss.
    c.renew(RenewRequest {
        name: a.name,
        owner_token: a.owner_token,
        ttl_ms: 0,
        ..Default::default()
    })
    .await
    .unwrap_err();
    // Nor is a stranger's token on a held lock.
    c.renew(RenewRequest {
        name: b.name,
        owner_token: "0123456789abcdef0123456789abcdef".into(),
        ttl_ms: 0,
        ..Default::default()
    })
    .await
    .unwrap_err();
    // A lease that expired is, once, when its holder learns it.
    let e = must_acquire(&mut c, "m3", 500).await;
    common::eventually(Duration::from_secs(5), "m3 to expire", || {
        let mut c = c.clone();
        async move {
            c.describe(leasehold_server::proto::DescribeRequest {
                name: "m3".into(),
                ..Default::default()
            })
            .await
            .is_ok_and(|d| !d.into_inner().held)
        }
    })
    .await;
    for _ in 0..2 {
        c.renew(RenewRequest {
            name: e.name.clone(),
            owner_token: e.owner_token.clone(),
            ttl_ms: 0,
            ..Default::default()
        })
        .await
        .unwrap_err();
    }

    let after = scrape(broker.metrics_addr).await;
    assert_eq!(sample(&after, "lease_acquired_total"), 3.0);
    assert_eq!(sample(&after, "leasehold_lease_released_total"), 1.0);
    assert_eq!(sample(&after, "leasehold_lease_acquire_refused_total"), 1.0);
    assert_eq!(sample(&after, "lease_lost_total{reason=\"expired\"}"), 1.0);
    assert_eq!(
        sample(&after, "lease_lost_total{reason=\"not_owner\"}"),
        0.0
    );
    assert_eq!(sample(&after, "heartbeat_latency_seconds_count"), 5.0);
    assert_eq!(
        sample(&after, "leasehold_lease_acquire_wait_seconds_count"),
        3.0
    );
    assert_eq!(sample(&after, "leasehold_lease_waiters"), 0.0);
    assert_eq!(sample(&after, "leasehold_store_up"), 1.0);
    assert_eq!(sample(&after, "leasehold_store_errors_total"), 0.0);
    assert!(!after.contains("m1"), "a lock name leaked into the metrics");
}

/// Anything but GET /metrics gets a clear HTTP error.
#[tokio::test]
async fn the_metrics_port_serves_only_metrics() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let broker = Broker::start("memory").await;
    let mut stream = tokio::net::TcpStream::connect(broker.metrics_addr)
        .await
        .unwrap();
    stream
        .write_all(b"GET /other HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 404"), "{response}");
    assert!(response.contains("/metrics"));
}

/// The older v1alpha reflection service, which older grpcurl versions ask,
/// lists the API too.
#[tokio::test]
async fn reflection_v1alpha_lists_the_api() {
    use tonic_reflection::pb::v1alpha::{
        server_reflection_client::ServerReflectionClient,
        server_reflection_request::MessageRequest, server_reflection_response::MessageResponse,
        ServerReflectionRequest,
    };
    let broker = Broker::start("memory").await;
    let mut reflection = ServerReflectionClient::new(broker.channel().await);
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut responses = reflection
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .expect("v1alpha reflection")
        .into_inner();
    match responses.next().await.unwrap().unwrap().message_response {
        Some(MessageResponse::ListServicesResponse(list)) => {
            assert!(
                list.service
                    .iter()
                    .any(|s| s.name == "leasehold.v1.LeaseholdService"),
                "{list:?}"
            );
        }
        other => panic!("expected a service list, got {other:?}"),
    }
}
