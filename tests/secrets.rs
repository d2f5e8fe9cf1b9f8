//! No secret leaves the broker: owner tokens (its own and those presented to
//! it), bearer tokens (right and wrong) and the Redis password never appear
//! in its logs (at `debug`), in the status messages clients get, or in
//! `/metrics`, through a scenario that takes every path that handles them:
//! authentication, grants, waits, heartbeats with right and wrong tokens,
//! releases, revocation, a reload of the auth file, and Redis going away.

use leasehold_testkit as common;

use std::time::Duration;

use common::{acquire_req, eventually, scrape, BrokerProcess, RedisServer};
use leasehold_client::Credentials;
use leasehold_server::{
    auth::{generate_token, token_credential},
    proto::{
        CheckFenceRequest, DescribeRequest, KeepAliveRequest, LeaseRef, ReleaseRequest,
        RevokeRequest,
    },
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Endpoint;

const PASSWORD: &str = "pw-7f3a9c1e5b2d4f60a8e1c3b5d7f9a2c4";
/// A token a client presents without owning it: as secret as a real one (it
/// may be somebody's).
const PRESENTED: &str = "0123456789abcdef0123456789abcdef";

#[tokio::test]
async fn no_token_or_password_in_logs_statuses_or_metrics() {
    let redis = RedisServer::start_with_password(PASSWORD);
    let log = std::env::temp_dir().join(format!(
        "leasehold-secrets-{}-{}.log",
        std::process::id(),
        common::free_port()
    ));
    let (bearer, wrong_bearer) = (generate_token().unwrap(), generate_token().unwrap());
    let auth = log.with_extension("auth");
    std::fs::write(
        &auth,
        format!("app use,admin {}\n", token_credential(&bearer)),
    )
    .unwrap();
    let broker = BrokerProcess::start_logged(
        &redis.url_with_password(PASSWORD),
        &["--auth-file", auth.to_str().unwrap()],
        Some(&log),
    )
    .await;
    let channel = Endpoint::from_shared(broker.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = Credentials::bearer(Some(&bearer))
        .unwrap()
        .client(channel.clone());
    let mut secrets = vec![
        PASSWORD.to_owned(),
        PRESENTED.to_owned(),
        bearer.clone(),
        wrong_bearer.clone(),
    ];
    let mut statuses = Vec::new();

    // A stranger's token is refused.
    let refused = Credentials::bearer(Some(&wrong_bearer))
        .unwrap()
        .client(channel)
        .acquire(acquire_req("secrets/a", 5_000, "stranger", 0))
        .await
        .expect_err("an unknown token");
    statuses.push(refused.message().to_owned());

    // A grant, and a waiter queued behind it.
    let held = client
        .acquire(acquire_req("secrets/a", 5_000, "test", 0))
        .await
        .unwrap()
        .into_inner()
        .lease
        .unwrap();
    secrets.push(held.owner_token.clone());
    let mut waiter_client = client.clone();
    let waiter = tokio::spawn(async move {
        waiter_client
            .acquire(acquire_req("secrets/a", 5_000, "waiter", 10_000))
            .await
    });
    while client
        .describe(DescribeRequest {
            name: "secrets/a".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .waiters
        == 0
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    // Heartbeats naming the lease with its token and with a wrong one.
    let (tx, rx) = mpsc::channel(4);
    let mut beats = client
        .keep_alive(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    for seq in 1..=2 {
        tx.send(KeepAliveRequest {
            seq,
            leases: vec![
                LeaseRef {
                    name: "secrets/a".into(),
                    owner_token: held.owner_token.clone(),
                    ttl_ms: 0,
                    ..Default::default()
                },
                LeaseRef {
                    name: "secrets/a".into(),
                    owner_token: PRESENTED.into(),
                    ttl_ms: 0,
                    ..Default::default()
                },
            ],
            ..Default::default()
        })
        .await
        .unwrap();
        let answer = beats.message().await.unwrap().expect("a heartbeat answer");
        statuses.extend(answer.leases.into_iter().map(|s| s.message));
    }
    drop(tx);

    // A release with the wrong token, then the right one: the waiter gets it.
    let wrong = client
        .release(ReleaseRequest {
            name: "secrets/a".into(),
            owner_token: PRESENTED.into(),
        })
        .await
        .expect_err("not the owner");
    statuses.push(wrong.message().to_owned());
    client
        .release(ReleaseRequest {
            name: "secrets/a".into(),
            owner_token: held.owner_token.clone(),
        })
        .await
        .unwrap();
    let second = waiter
        .await
        .unwrap()
        .expect("the waiter is granted")
        .into_inner()
        .lease
        .expect("a lease");
    secrets.push(second.owner_token.clone());
    client
        .check_fence(CheckFenceRequest {
            name: "secrets/a".into(),
            fence: second.fence,
        })
        .await
        .unwrap();

    // Revoked, then released by its holder anyway: refused, and said why.
    client
        .revoke(RevokeRequest {
            name: "secrets/a".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let revoked = client
        .release(ReleaseRequest {
            name: "secrets/a".into(),
            owner_token: second.owner_token.clone(),
        })
        .await
        .expect_err("revoked");
    statuses.push(revoked.message().to_owned());

    // The auth file is reloaded (the token stays).
    broker.hang_up();
    eventually(Duration::from_secs(10), "the auth file is reloaded", || {
        let log = log.clone();
        async move {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .contains("auth file reloaded")
        }
    })
    .await;

    let metrics = scrape(broker.metrics_addr).await;

    // Redis goes away: errors are logged and returned, without the password.
    drop(redis);
    let down = client
        .acquire(acquire_req("secrets/b", 5_000, "test", 0))
        .await
        .expect_err("Redis is gone");
    statuses.push(down.message().to_owned());
    drop(broker);

    let logs = std::fs::read_to_string(&log).expect("the broker's log");
    let _ = std::fs::remove_file(&log);
    let _ = std::fs::remove_file(&auth);
    // The capture worked: the scenario's events are in it.
    for event in ["granted", "released"] {
        assert!(
            logs.contains(event),
            "no {event:?} line in the log:\n{logs}"
        );
    }
    assert!(statuses.iter().any(|m| !m.is_empty()), "{statuses:?}");
    for secret in &secrets {
        let shown = &secret[..8];
        assert!(
            !logs.contains(secret.as_str()),
            "a secret ({shown}...) is in the broker's log"
        );
        for message in &statuses {
            assert!(
                !message.contains(secret.as_str()),
                "a secret ({shown}...) is in a status message: {message}"
            );
        }
        assert!(
            !metrics.contains(secret.as_str()),
            "a secret ({shown}...) is in /metrics"
        );
    }
}
