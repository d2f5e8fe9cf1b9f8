//! Every request limit (docs/configuration.md, "Configuration reference") is refused with
//! the right status and a message naming the limit, and no bad request
//! touches a bystander's lease.

use leasehold_testkit as common;

use common::{acquire_req, brokers_on_each_store, must_acquire};
use leasehold_server::proto::{AcquireRequest, DescribeRequest, ReleaseRequest, RenewRequest};
use tonic::Code;
use tonic_types::StatusExt;

const TOKEN: &str = "0123456789abcdef0123456789abcdef";

#[tokio::test]
async fn bad_requests_get_clear_statuses_and_touch_nothing_else() {
    for (store, broker, _redis) in brokers_on_each_store().await {
        let mut c = broker.client().await;
        let bystander = must_acquire(&mut c, "bystander", 60_000).await;

        let long_name = "n".repeat(257);
        let long_holder = "h".repeat(257);
        let acquires = [
            (acquire_req("", 1_000, "", 0), "empty"),
            (acquire_req(&long_name, 1_000, "", 0), "limit is 256 bytes"),
            (acquire_req("a b", 1_000, "", 0), "allowed are"),
            (acquire_req("a{b}", 1_000, "", 0), "allowed are"),
            (acquire_req("naïve", 1_000, "", 0), "allowed are"),
            (acquire_req("nul\0", 1_000, "", 0), "allowed are"),
            (acquire_req("ok", 499, "", 0), "--ttl-min"),
            (acquire_req("ok", 3_600_001, "", 0), "--ttl-max"),
            (acquire_req("ok", u64::MAX, "", 0), "--ttl-max"),
            (
                acquire_req("ok", 1_000, &long_holder, 0),
                "--max-holder-len",
            ),
            (
                acquire_req("ok", 1_000, "line\nbreak", 0),
                "control character",
            ),
            (acquire_req("ok", 1_000, "", 300_001), "--max-wait"),
            (acquire_req("ok", 1_000, "", u64::MAX), "--max-wait"),
            (
                AcquireRequest {
                    limit: 1_001,
                    ..acquire_req("ok", 1_000, "", 0)
                },
                "--max-semaphore-limit",
            ),
            (
                AcquireRequest {
                    lock_delay_ms: 60_001,
                    ..acquire_req("ok", 1_000, "", 0)
                },
                "--max-lock-delay",
            ),
            (
                AcquireRequest {
                    limit: 3,
                    lock_delay_ms: 1_000,
                    ..acquire_req("ok", 1_000, "", 0)
                },
                "a lock-delay applies to locks only",
            ),
        ];
        for (request, hint) in acquires {
            let shown = format!("{:?}", request.name.get(..20).unwrap_or(&request.name));
            let status = c.acquire(request).await.unwrap_err();
            assert_eq!(
                status.code(),
                Code::InvalidArgument,
                "{store} {shown}: {status:?}"
            );
            assert!(
                status.message().contains(hint),
                "{store} {shown}: '{}' lacks '{hint}'",
                status.message()
            );
            // For programs: the reason, the argument and, for a wait, the
            // broker's maximum, in the status's google.rpc.ErrorInfo.
            let details = status.get_error_details();
            let info = details.error_info().expect("an ErrorInfo");
            assert_eq!(
                (info.reason.as_str(), info.domain.as_str()),
                ("BAD_ARGUMENT", "leasehold.v1"),
                "{store} {shown}"
            );
            let argument = info.metadata.get("argument").expect("the argument");
            if hint == "--max-wait" {
                assert_eq!(argument, "wait");
                assert_eq!(
                    info.metadata.get("max_wait_ms").map(String::as_str),
                    Some("300000")
                );
            }
            // The message speaks of a TTL, a wait, a lock-delay: never of
            // the proto's fields.
            for field in ["ttl_ms", "wait_timeout_ms", "lock_delay_ms", "owner_token"] {
                assert!(
                    !status.message().contains(field),
                    "{store} {shown}: {status:?}"
                );
            }
        }

        let renews = [
            (
                RenewRequest {
                    name: "".into(),
                    owner_token: TOKEN.into(),
                    ttl_ms: 0,
                    ..Default::default()
                },
                Code::InvalidArgument,
                "empty",
            ),
            (
                RenewRequest {
                    name: "x".into(),
                    owner_token: "".into(),
                    ttl_ms: 0,
                    ..Default::default()
                },
                Code::InvalidArgument,
                "the owner token is empty",
            ),
            (
                RenewRequest {
                    name: "x".into(),
                    owner_token: "guess".into(),
                    ttl_ms: 0,
                    ..Default::default()
                },
                Code::InvalidArgument,
                "32 lowercase hex",
            ),
            (
                RenewRequest {
                    name: "x".into(),
                    owner_token: TOKEN.into(),
                    ttl_ms: 10,
                    ..Default::default()
                },
                Code::InvalidArgument,
                "--ttl-min",
            ),
            (
                RenewRequest {
                    name: "nobody".into(),
                    owner_token: TOKEN.into(),
                    ttl_ms: 0,
                    ..Default::default()
                },
                Code::NotFound,
                "no lease",
            ),
            (
                RenewRequest {
                    name: "bystander".into(),
                    owner_token: TOKEN.into(),
                    ttl_ms: 0,
                    ..Default::default()
                },
                Code::FailedPrecondition,
                "another owner",
            ),
        ];
        for (request, code, hint) in renews {
            let status = c.renew(request).await.unwrap_err();
            assert_eq!(status.code(), code, "{store}: {status:?}");
            assert!(
                status.message().contains(hint),
                "{store}: '{}' lacks '{hint}'",
                status.message()
            );
        }

        let releases = [
            (
                ReleaseRequest {
                    name: "bad name".into(),
                    owner_token: TOKEN.into(),
                },
                Code::InvalidArgument,
                "allowed are",
            ),
            (
                ReleaseRequest {
                    name: "x".into(),
                    owner_token: TOKEN.to_uppercase(),
                },
                Code::InvalidArgument,
                "32 lowercase hex",
            ),
            (
                ReleaseRequest {
                    name: "nobody".into(),
                    owner_token: TOKEN.into(),
                },
                Code::NotFound,
                "no lease",
            ),
            (
                ReleaseRequest {
                    name: "bystander".into(),
                    owner_token: TOKEN.into(),
                },
                Code::FailedPrecondition,
                "another owner",
            ),
        ];
        for (request, code, hint) in releases {
            let status = c.release(request).await.unwrap_err();
            assert_eq!(status.code(), code, "{store}: {status:?}");
            assert!(
                status.message().contains(hint),
                "{store}: '{}' lacks '{hint}'",
                status.message()
            );
        }

        let status = c
            .describe(DescribeRequest {
                name: long_name.clone(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument);

        // Someone else's lock cannot be taken either.
        let status = c
            .acquire(acquire_req("bystander", 1_000, "thief", 0))
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::Aborted);

        // The bystander's lease is untouched: same fence, still renewable.
        let d = c
            .describe(DescribeRequest {
                name: "bystander".into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert!(d.held && d.fence == bystander.fence, "{store}: {d:?}");
        c.renew(RenewRequest {
            name: "bystander".into(),
            owner_token: bystander.owner_token.clone(),
            ttl_ms: 0,
            ..Default::default()
        })
        .await
        .expect("the bystander still owns its lease");
        // The broker is still serving after all that.
        must_acquire(&mut c, "after", 1_000).await;
    }
}

/// The limits are configurable: a broker with tighter bounds enforces them.
#[tokio::test]
async fn configured_limits_are_enforced() {
    let broker = common::Broker::start_with("memory", |c| {
        c.limits.max_name_len = 8;
        c.limits.ttl_max = std::time::Duration::from_secs(5);
        c.limits.ttl_default = std::time::Duration::from_secs(2);
    })
    .await;
    let mut c = broker.client().await;
    let status = c
        .acquire(acquire_req("123456789", 1_000, "", 0))
        .await
        .unwrap_err();
    assert!(
        status.message().contains("limit is 8 bytes"),
        "{}",
        status.message()
    );
    let status = c
        .acquire(acquire_req("short", 6_000, "", 0))
        .await
        .unwrap_err();
    assert!(
        status
            .message()
            .contains("above this broker's maximum of 5 s (--ttl-max)"),
        "{}",
        status.message()
    );
    // ttl_ms = 0 takes the configured default.
    assert_eq!(must_acquire(&mut c, "short", 0).await.ttl_ms, 2_000);
}

/// A broker refuses to start with limits that contradict each other.
#[tokio::test]
async fn contradictory_limits_refuse_to_start() {
    let broker = common::Broker::start_with("memory", |c| {
        c.limits.ttl_min = std::time::Duration::from_secs(7200);
    })
    .await;
    let err = broker.stop().await.unwrap_err();
    assert!(err.to_string().contains("--ttl-min"), "{err}");
}
