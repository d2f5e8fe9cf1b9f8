//! Rolling updates across the Redis lease record formats: brokers of the
//! version before format 2 (built from this clone's history by
//! `scripts/previous-broker`) and of this one, on one Redis, contenders on
//! each; one holder at a time throughout, fences rising in grant order
//! (`common::history`).
//!
//! The supported path (docs/operations.md, "Upgrading"): new brokers join
//! with `--redis-record-format 1` while any old one serves; once none does,
//! they are restarted one by one without the flag. And the path an operator
//! may take by mistake, new brokers with the default format 2 beside old
//! ones: the old ones cannot read what the new ones write, and refuse it
//! (an error status) rather than grant a held name.

use leasehold_testkit as common;

use std::time::Duration;

use common::{acquire_req, history::Grant, BrokerProcess, RedisServer};
use leasehold_server::{
    proto::{leasehold_service_client::LeaseholdServiceClient, ReleaseRequest, RenewRequest},
    store::{lease_key, read_record},
};
use tonic::{transport::Channel, Code};

const TTL_MS: u64 = 5_000;
const LOCKS: [&str; 2] = ["ledger", "invoices"];
const RECORD_FORMAT_1: &[&str] = &["--redis-record-format", "1"];

/// What one contender saw: its grants, and the errors a broker answered
/// instead of a grant or a release.
#[derive(Default)]
struct Seen {
    grants: Vec<Grant>,
    errors: Vec<String>,
}

/// Cycles waiting Acquire / Renew / short hold / Release on `LOCKS` through
/// `client` until `stop`, recording each grant. ABORTED (the wait ran out)
/// is a turn not taken; another error status is recorded, and the lease
/// it concerned is counted held until it could have expired.
async fn contend(
    mut client: LeaseholdServiceClient<Channel>,
    who: usize,
    stop: tokio::time::Instant,
) -> Seen {
    let mut seen = Seen::default();
    let mut turn = 0;
    while tokio::time::Instant::now() < stop {
        let lock = LOCKS[turn % LOCKS.len()];
        turn += 1;
        let sent = tokio::time::Instant::now();
        let lease = match client
            .acquire(acquire_req(lock, TTL_MS, &format!("c{who}"), 2_000))
            .await
        {
            Ok(r) => r.into_inner().lease.expect("a lease"),
            Err(s) if s.code() == Code::Aborted => continue,
            Err(s) => {
                seen.errors.push(format!("acquire {lock}: {s:?}"));
                // Not a grant as far as the caller knows; wait a little, as
                // a client backing off would.
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let from = tokio::time::Instant::now();
        // A renewal in the hold: the record is rewritten in this broker's
        // format.
        let renewed = client
            .renew(RenewRequest {
                name: lock.into(),
                owner_token: lease.owner_token.clone(),
                ttl_ms: 0,
                ..Default::default()
            })
            .await;
        if let Err(s) = renewed {
            seen.errors.push(format!("renew {lock}: {s:?}"));
        }
        tokio::time::sleep(Duration::from_millis(3)).await;
        let release_sent = tokio::time::Instant::now();
        let until = match client
            .release(ReleaseRequest {
                name: lock.into(),
                owner_token: lease.owner_token,
            })
            .await
        {
            Ok(_) => release_sent,
            Err(s) => {
                seen.errors.push(format!("release {lock}: {s:?}"));
                // Relied on until it could have expired.
                sent + Duration::from_millis(TTL_MS)
            }
        };
        seen.grants.push(Grant::new(
            lock,
            who,
            lease.fence,
            sent.into_std(),
            from.into_std(),
            until.into_std(),
        ));
    }
    seen
}

/// Contenders on each of `brokers` (four each) for `secs`; what each
/// broker's contenders saw, in the order of `brokers`.
async fn contend_on(brokers: &[&BrokerProcess], secs: u64) -> Vec<Seen> {
    let stop = tokio::time::Instant::now() + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for (b, broker) in brokers.iter().enumerate() {
        let mut mine = Vec::new();
        for c in 0..4 {
            mine.push(tokio::spawn(contend(
                broker.client().await,
                b * 100 + c,
                stop,
            )));
        }
        tasks.push(mine);
    }
    let mut seen = Vec::new();
    for mine in tasks {
        let mut all = Seen::default();
        for task in mine {
            let s = task.await.unwrap();
            all.grants.extend(s.grants);
            all.errors.extend(s.errors);
        }
        seen.push(all);
    }
    seen
}

/// [`assert_one_holder`], and no broker answered an error.
fn assert_one_holder_and_no_error(phase: &str, seen: &[Seen]) {
    assert_one_holder(phase, seen);
    for (b, s) in seen.iter().enumerate() {
        assert!(s.errors.is_empty(), "{phase}: broker {b}: {:?}", s.errors);
    }
}

/// One holder at a time and fences rising across every broker's grants;
/// each broker granted some.
fn assert_one_holder(phase: &str, seen: &[Seen]) {
    for (b, s) in seen.iter().enumerate() {
        eprintln!(
            "{phase}: broker {b}: {} grants, {} errors",
            s.grants.len(),
            s.errors.len()
        );
        assert!(
            s.grants.len() >= 10,
            "{phase}: broker {b} granted only {}: {:?}",
            s.grants.len(),
            s.errors.first()
        );
    }
    let grants: Vec<Grant> = seen.iter().flat_map(|s| s.grants.clone()).collect();
    common::history::assert_holds(&grants);
}

/// The format of the record of `name` while it is held.
async fn format_of(redis: &RedisServer, name: &str) -> Option<u8> {
    let mut conn = redis.connection().await;
    read_record(&mut conn, &lease_key("test:", name))
        .await
        .unwrap()
        .map(|r| r.format)
}

/// A lease on `name` through `broker`, held: the format it was written in.
async fn written_by(redis: &RedisServer, broker: &BrokerProcess, name: &str) -> Option<u8> {
    let mut client = broker.client().await;
    let lease = common::must_acquire(&mut client, name, TTL_MS).await;
    let format = format_of(redis, name).await;
    client
        .release(ReleaseRequest {
            name: name.into(),
            owner_token: lease.owner_token,
        })
        .await
        .unwrap();
    format
}

/// The supported rolling update, step by step: old and new (writing format
/// 1) brokers; then new ones of both formats; then format 2 alone. Every
/// step keeps one holder at a time, with no error on either side.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_update_keeps_one_holder_at_a_time() {
    let redis = RedisServer::start();
    let old = BrokerProcess::start_previous(&redis.url(), &[]).await;
    let first = BrokerProcess::start_logged(&redis.url(), RECORD_FORMAT_1, None).await;
    assert_eq!(written_by(&redis, &first, "probe").await, Some(1));

    let seen = contend_on(&[&old, &first], 3).await;
    assert_one_holder_and_no_error("old + new writing format 1", &seen);

    // The old broker is gone (updated): the new ones are switched to format
    // 2 one at a time.
    drop(old);
    let second = BrokerProcess::start(&redis.url()).await;
    assert_eq!(written_by(&redis, &second, "probe").await, Some(2));
    let seen = contend_on(&[&first, &second], 3).await;
    assert_one_holder_and_no_error("new writing format 1 + new writing format 2", &seen);

    drop(first);
    let first = BrokerProcess::start(&redis.url()).await;
    let seen = contend_on(&[&first, &second], 2).await;
    assert_one_holder_and_no_error("new brokers writing format 2", &seen);
    assert_eq!(written_by(&redis, &first, "probe").await, Some(2));
}

/// New brokers started with the default format beside old ones (the step
/// the upgrade notes say to take first, skipped): the old brokers answer
/// an error for a name whose record is in format 2, and never grant it
/// while it is held; one holder at a time still.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_broker_refuses_a_format_2_record_rather_than_grant_it() {
    let redis = RedisServer::start();
    let old = BrokerProcess::start_previous(&redis.url(), &[]).await;
    let new = BrokerProcess::start(&redis.url()).await;

    // A held name in format 2: the old broker cannot read it, and says so.
    let mut client = new.client().await;
    let held = common::must_acquire(&mut client, "held", TTL_MS).await;
    assert_eq!(format_of(&redis, "held").await, Some(2));
    let refused = old
        .client()
        .await
        .acquire(acquire_req("held", TTL_MS, "old", 0))
        .await
        .expect_err("the old broker granted a name held in format 2");
    assert_ne!(refused.code(), Code::Ok);
    eprintln!("the old broker's answer: {refused:?}");
    client
        .release(ReleaseRequest {
            name: "held".into(),
            owner_token: held.owner_token,
        })
        .await
        .unwrap();
    // Released (no record left): the old broker grants it again.
    common::must_acquire(&mut old.client().await, "held", TTL_MS).await;

    let seen = contend_on(&[&old, &new], 3).await;
    assert_one_holder("old + new writing format 2", &seen);
    assert!(
        seen[1].errors.is_empty(),
        "the new broker reads both formats: {:?}",
        seen[1].errors
    );
}

/// A rollback, as docs/operations.md says to make it: the new brokers are
/// restarted with `--redis-record-format 1`, a held lease's next renewal
/// rewrites its record in format 1, and then a broker of the old version
/// reads it: it refuses the name to another caller (held, not an error),
/// renews it for its holder and releases it.
#[tokio::test]
async fn a_rollback_leaves_held_leases_to_the_old_broker() {
    let redis = RedisServer::start();
    let new = BrokerProcess::start(&redis.url()).await;
    let mut holder = new.client().await;
    let lease = common::must_acquire(&mut holder, "held", TTL_MS).await;
    assert_eq!(format_of(&redis, "held").await, Some(2));

    // The first step of the rollback: the new broker writes format 1.
    drop(new);
    let rolled = BrokerProcess::start_logged(&redis.url(), RECORD_FORMAT_1, None).await;
    let renew = |owner_token: &str| RenewRequest {
        name: "held".into(),
        owner_token: owner_token.into(),
        ttl_ms: 0,
        ..Default::default()
    };
    rolled
        .client()
        .await
        .renew(renew(&lease.owner_token))
        .await
        .expect("renewed through the broker writing format 1");
    assert_eq!(format_of(&redis, "held").await, Some(1));

    // The second: the old version.
    drop(rolled);
    let old = BrokerProcess::start_previous(&redis.url(), &[]).await;
    let mut other = old.client().await;
    let refused = other
        .acquire(acquire_req("held", TTL_MS, "other", 0))
        .await
        .expect_err("the old broker granted a held name");
    assert_eq!(refused.code(), Code::Aborted, "{refused:?}");
    let renewed = other
        .renew(renew(&lease.owner_token))
        .await
        .expect("the old broker renews the lease")
        .into_inner();
    assert_eq!(renewed.fence, lease.fence);
    other
        .release(ReleaseRequest {
            name: "held".into(),
            owner_token: lease.owner_token.clone(),
        })
        .await
        .expect("the old broker releases it");
    common::must_acquire(&mut other, "held", TTL_MS).await;
}
