//! The audit trail: every grant, release, loss and revoke is one INFO event
//! of target `leasehold::audit`, with the lock, the fence and the holder
//! label (never the owner token), which `--log-format json` makes an object
//! a log pipeline can index; `--audit-log false` quiets them.

use leasehold_testkit as common;

use std::time::Duration;

use common::BrokerProcess;
use leasehold_client::{AcquireOptions, Client, ClientError, LossReason};
use serde_json::Value;

/// A log file of this test's own.
fn log_path(what: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!(
        "leasehold-audit-{what}-{}-{}.log",
        std::process::id(),
        common::free_port()
    ))
}

/// The audit events in `log`: the `fields` of each JSON line of the audit
/// target, in order.
fn audit_events(log: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|event| event["target"] == "leasehold::audit")
        .map(|event| {
            assert_eq!(event["level"], "INFO", "{event}");
            event["fields"].clone()
        })
        .collect()
}

/// The events of `kind` on `lock`.
fn of<'a>(events: &'a [Value], kind: &str, lock: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| e["event"] == kind && e["lock"] == lock)
        .collect()
}

#[tokio::test]
async fn every_change_of_a_lease_is_one_audit_event_without_its_token() {
    let log = log_path("on");
    let broker = BrokerProcess::start_logged(
        "memory",
        &["--log-format", "json", "--enable-revoke"],
        Some(&log),
    )
    .await;
    let client = Client::connect(broker.url()).await.unwrap();
    let opts = |ttl_ms| {
        AcquireOptions::new()
            .holder("pod-a")
            .ttl(Duration::from_millis(ttl_ms))
    };

    // Granted, then released by its holder.
    let kept = client.acquire("audit/kept", opts(10_000)).await.unwrap();
    let fence = kept.fence();
    kept.release().await.unwrap();
    // Granted, then revoked by an operator.
    let revoked = client.acquire("audit/revoked", opts(10_000)).await.unwrap();
    let revoked_fence = client.revoke("audit/revoked").await.unwrap();
    assert_eq!(revoked_fence, revoked.fence());
    // Granted without keep-alive, expired, and its holder's late release
    // is the first news of it: lost, expired.
    let grant = client.grant("audit/expired", opts(500)).await.unwrap();
    common::eventually(Duration::from_secs(10), "the grant to expire", || async {
        !client.describe("audit/expired").await.unwrap().held
    })
    .await;
    match client.release_token(&grant.name, &grant.owner_token).await {
        Err(ClientError::Lost(LossReason::Expired)) => {}
        other => panic!("{other:?}"),
    }
    drop(revoked);

    let events = audit_events(&log);
    let granted = of(&events, "granted", "audit/kept");
    assert_eq!(granted.len(), 1, "{events:#?}");
    assert_eq!(granted[0]["fence"], fence);
    assert_eq!(granted[0]["holder"], "pod-a");
    assert_eq!(granted[0]["ttl_ms"], 10_000);
    let released = of(&events, "released", "audit/kept");
    assert_eq!(released.len(), 1, "{events:#?}");
    assert_eq!(released[0]["by"], "holder");
    // The token by its first characters only, the same in both: a grant
    // and its release can be joined.
    assert_eq!(granted[0]["token"], released[0]["token"]);
    assert!(
        granted[0]["token"].as_str().unwrap().len() < 16,
        "{}",
        granted[0]
    );

    let revokes = of(&events, "revoked", "audit/revoked");
    assert_eq!(revokes.len(), 1, "{events:#?}");
    assert_eq!(revokes[0]["fence"], revoked_fence);
    let lost = of(&events, "lost", "audit/revoked");
    assert_eq!(lost.len(), 1, "{events:#?}");
    assert_eq!(lost[0]["reason"], "revoked");

    let expired = of(&events, "lost", "audit/expired");
    assert_eq!(expired.len(), 1, "{events:#?}");
    assert_eq!(expired[0]["reason"], "expired");
    assert_eq!(of(&events, "granted", "audit/expired").len(), 1);

    // No line of the log holds an owner token whole.
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains(&grant.owner_token), "a token in the log");
    let _ = std::fs::remove_file(&log);
}

#[tokio::test]
async fn audit_log_false_quiets_the_trail_only() {
    let log = log_path("off");
    let broker = BrokerProcess::start_logged(
        "memory",
        &["--log-format", "json", "--audit-log", "false"],
        Some(&log),
    )
    .await;
    let client = Client::connect(broker.url()).await.unwrap();
    let lease = client
        .acquire("audit/quiet", AcquireOptions::new())
        .await
        .unwrap();
    lease.release().await.unwrap();
    assert!(audit_events(&log).is_empty());
    // The rest of the log is still there (the broker's start).
    assert!(std::fs::read_to_string(&log).unwrap().lines().count() > 0);
    let _ = std::fs::remove_file(&log);
}
