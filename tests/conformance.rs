//! The store contract, run against every backend of the harness's one
//! list (`common::backends`): the embedded memory store, a real
//! redis-server, a real PostgreSQL and a real etcd. A backend is correct
//! when every test here passes on it. Each test is given its backend's
//! [`Timing`]: etcd's leases are whole seconds and end up to half a second
//! late, so there the short times are stretched.

use leasehold_testkit as common;

use common::backends::Timing;

use std::time::{Duration, Instant};

use leasehold_server::store::{
    Acquired, Blocked, BlockedBy, Checked, Event, GrantSpec, Listed, Renewed, Revocation, Store,
    QUEUE_LIFETIME, QUEUE_REFRESH,
};

fn spec(name: &str, token: &str, ttl_ms: u64) -> GrantSpec {
    GrantSpec {
        name: name.into(),
        token: token.into(),
        holder: format!("holder-{token}"),
        ttl_ms,
        lock_delay_ms: 0,
        limit: 1,
        queued: false,
    }
}

async fn grant(store: &Store, name: &str, token: &str, ttl_ms: u64) -> u64 {
    match store
        .acquire(&spec(name, token, ttl_ms))
        .await
        .expect("store answers")
    {
        Acquired::Granted { fence, .. } => fence,
        blocked @ Acquired::Blocked(_) => panic!("{name} unexpectedly not granted: {blocked:?}"),
    }
}

/// A free name is granted; a second acquirer is refused and told who holds it.
async fn grant_then_second_acquirer_refused(store: &Store, _: Timing) {
    let fence = grant(store, "a", "t1", 5_000).await;
    match store.acquire(&spec("a", "t2", 5_000)).await.unwrap() {
        Acquired::Blocked(held) => {
            assert_eq!(held.by, BlockedBy::Holder);
            assert_eq!((held.position, held.queued), (0, 0), "a try does not queue");
            assert_eq!(held.holder, "holder-t1");
            assert_eq!(held.fence, fence);
            assert!(
                held.remaining_ms > 0 && held.remaining_ms <= 5_000,
                "{held:?}"
            );
        }
        granted @ Acquired::Granted { .. } => panic!("second acquirer got {granted:?}"),
    }
}

/// Renew works for the owner only, and reports the TTL it applied.
async fn renew_with_right_and_wrong_token(store: &Store, _: Timing) {
    let fence = grant(store, "a", "t1", 1_000).await;
    let renewed = store.renew("a", "t1", Some(4_000)).await.unwrap();
    assert_eq!(
        renewed,
        Checked::Done(Renewed {
            ttl_ms: 4_000,
            fence
        })
    );
    let info = store.describe("a").await.unwrap().lease.expect("held");
    assert_eq!(info.ttl_ms, 4_000);
    assert!(
        info.remaining_ms > 1_000,
        "renewal extended the lease: {info:?}"
    );

    assert_eq!(
        store.renew("a", "intruder", Some(4_000)).await.unwrap(),
        Checked::NotOwner { fence }
    );
    assert_eq!(
        store.renew("b", "t1", None).await.unwrap(),
        Checked::NotHeld
    );
    // `None` keeps the lease's own TTL.
    assert_eq!(
        store.renew("a", "t1", None).await.unwrap(),
        Checked::Done(Renewed {
            ttl_ms: 4_000,
            fence
        })
    );
}

/// Release works for the owner only; a wrong token leaves the lease intact;
/// a second release with the owner's token (a retry whose first try did the
/// work) is told so, not "not held".
async fn release_with_right_and_wrong_token(store: &Store, _: Timing) {
    let fence = grant(store, "a", "t1", 5_000).await;
    assert_eq!(
        store.release("a", "intruder").await.unwrap(),
        Checked::NotOwner { fence }
    );
    assert_eq!(
        store.describe("a").await.unwrap().lease.map(|l| l.fence),
        Some(fence)
    );

    assert_eq!(store.release("a", "t1").await.unwrap(), Checked::Done(()));
    assert_eq!(store.describe("a").await.unwrap().lease, None);
    assert_eq!(store.release("a", "t1").await.unwrap(), Checked::Released);
    assert_eq!(
        store.renew("a", "t1", None).await.unwrap(),
        Checked::Released
    );
    let next = grant(store, "a", "t2", 5_000).await;
    // Still known after the next grant, and the new lease is untouched.
    assert_eq!(store.release("a", "t1").await.unwrap(), Checked::Released);
    assert_eq!(
        store.describe("a").await.unwrap().lease.map(|l| l.fence),
        Some(next)
    );
}

/// A lease nobody renews is gone at its TTL: free for the next acquirer, and
/// dead for its former owner, who is told "expired" once (the loss to
/// count), then "expired, reported already", even once the name is granted
/// again.
async fn expiry_frees_the_lock(store: &Store, t: Timing) {
    let first = grant(store, "a", "t1", t.ttl(300)).await;
    assert!(matches!(
        store.acquire(&spec("a", "t2", t.ttl(300))).await.unwrap(),
        Acquired::Blocked(Blocked {
            by: BlockedBy::Holder,
            ..
        })
    ));
    t.sleep(450).await;
    assert_eq!(store.describe("a").await.unwrap().lease, None);
    assert_eq!(
        store.renew("a", "t1", None).await.unwrap(),
        Checked::Expired
    );
    assert_eq!(
        store.renew("a", "t1", None).await.unwrap(),
        Checked::ExpiredReported
    );
    assert_eq!(
        store.release("a", "t1").await.unwrap(),
        Checked::ExpiredReported
    );
    let second = grant(store, "a", "t2", t.ttl(300)).await;
    assert!(second > first);
    assert_eq!(
        store.renew("a", "t1", None).await.unwrap(),
        Checked::ExpiredReported
    );
}

/// An expired lease's loss is reported once: to the first request of its
/// holder (a renewal, a release or a look), or, when the name is granted
/// again first, to that grant (`expired`); after that its token hears that
/// the loss was reported.
async fn an_expiry_is_reported_once(store: &Store, t: Timing) {
    for first_ask in ["renew", "release", "check"] {
        let name = format!("x/{first_ask}");
        grant(store, &name, "old", t.ttl(200)).await;
        t.sleep(300).await;
        let reported = match first_ask {
            "renew" => matches!(store.renew(&name, "old", None).await, Ok(Checked::Expired)),
            "release" => matches!(store.release(&name, "old").await, Ok(Checked::Expired)),
            _ => matches!(store.check(&name, "old").await, Ok(Checked::Expired)),
        };
        assert!(reported, "{first_ask}: not reported as expired");
        assert_eq!(
            store.check(&name, "old").await.unwrap(),
            Checked::ExpiredReported
        );
        assert!(matches!(
            store.acquire(&spec(&name, "new", 10_000)).await.unwrap(),
            Acquired::Granted { expired: 0, .. }
        ));
    }
    // Nobody asked: the next grant reports it, and its holder hears so.
    grant(store, "x/grant", "old", t.ttl(200)).await;
    t.sleep(300).await;
    let next = match store
        .acquire(&spec("x/grant", "new", 10_000))
        .await
        .unwrap()
    {
        Acquired::Granted { fence, expired } => {
            assert_eq!(expired, 1, "the grant reports the expiry");
            fence
        }
        other @ Acquired::Blocked(_) => panic!("{other:?}"),
    };
    assert_eq!(
        store.check("x/grant", "old").await.unwrap(),
        Checked::ExpiredReported
    );
    // The new lease is untouched.
    assert_eq!(
        store.check("x/grant", "new").await.unwrap(),
        Checked::Done(Renewed {
            ttl_ms: 10_000,
            fence: next
        })
    );
    // A semaphore's expired permit: reported by the next acquire.
    assert!(matches!(
        store
            .acquire(&permit("x/sem", "p1", t.ttl(200), 2))
            .await
            .unwrap(),
        Acquired::Granted { .. }
    ));
    t.sleep(300).await;
    assert!(matches!(
        store
            .acquire(&permit("x/sem", "p2", 10_000, 2))
            .await
            .unwrap(),
        Acquired::Granted { expired: 1, .. }
    ));
    assert_eq!(
        store.check("x/sem", "p1").await.unwrap(),
        Checked::ExpiredReported
    );
}

/// A reported expiry is remembered for the expired lease's token, not read
/// off the name's record: the grant that reports it replaces the lock lease
/// (or drops the permit), and the old token's renewals, looks and releases
/// then still hear "expired, reported already", never "not held" or "not
/// owner" (which a KeepAlive session that renewed the lease for longer than
/// it got would take for a store that lost it), nor "expired" again; no
/// later grant reports it again.
async fn a_reported_expiry_is_remembered_per_token(store: &Store, t: Timing) {
    // A lock lease: the grant reports it, then handoffs follow.
    grant(store, "e/lock", "old", t.ttl(200)).await;
    t.sleep(300).await;
    assert!(matches!(
        store.acquire(&spec("e/lock", "new", 10_000)).await.unwrap(),
        Acquired::Granted { expired: 1, .. }
    ));
    assert_eq!(
        store.renew("e/lock", "old", Some(3_000)).await.unwrap(),
        Checked::ExpiredReported
    );
    assert_eq!(
        store.check("e/lock", "old").await.unwrap(),
        Checked::ExpiredReported
    );
    assert_eq!(
        store.release("e/lock", "old").await.unwrap(),
        Checked::ExpiredReported
    );
    assert_eq!(
        store.release("e/lock", "new").await.unwrap(),
        Checked::Done(())
    );
    let third = match store
        .acquire(&spec("e/lock", "third", 10_000))
        .await
        .unwrap()
    {
        Acquired::Granted { fence, expired } => {
            assert_eq!(expired, 0, "reported twice");
            fence
        }
        other @ Acquired::Blocked(_) => panic!("{other:?}"),
    };
    let heartbeat = [leasehold_server::store::RenewItem {
        name: "e/lock".into(),
        token: "old".into(),
        ttl_ms: None,
    }];
    assert_eq!(
        store.renew_many(&heartbeat).await.unwrap(),
        [Checked::ExpiredReported]
    );
    // A stranger is still a stranger, and the live lease is untouched.
    assert_eq!(
        store.check("e/lock", "stranger").await.unwrap(),
        Checked::NotOwner { fence: third }
    );
    assert!(matches!(
        store.check("e/lock", "third").await.unwrap(),
        Checked::Done(Renewed { fence, .. }) if fence == third
    ));

    // A lock lease whose holder heard of its expiry first, then the grant.
    grant(store, "e/heard", "old", t.ttl(200)).await;
    t.sleep(300).await;
    assert_eq!(
        store.renew("e/heard", "old", None).await.unwrap(),
        Checked::Expired
    );
    assert!(matches!(
        store
            .acquire(&spec("e/heard", "new", 10_000))
            .await
            .unwrap(),
        Acquired::Granted { expired: 0, .. }
    ));
    assert_eq!(
        store.renew("e/heard", "old", None).await.unwrap(),
        Checked::ExpiredReported
    );

    // A permit dropped by a grant of the name.
    for (token, ttl_ms) in [("p1", 200), ("p2", 10_000)] {
        assert!(matches!(
            store
                .acquire(&permit("e/sem", token, t.ttl(ttl_ms), 2))
                .await
                .unwrap(),
            Acquired::Granted { .. }
        ));
    }
    t.sleep(300).await;
    assert!(matches!(
        store
            .acquire(&permit("e/sem", "p3", 10_000, 2))
            .await
            .unwrap(),
        Acquired::Granted { expired: 1, .. }
    ));
    assert_eq!(
        store.renew("e/sem", "p1", Some(3_000)).await.unwrap(),
        Checked::ExpiredReported
    );
    assert_eq!(
        store.check("e/sem", "p1").await.unwrap(),
        Checked::ExpiredReported
    );
    assert_eq!(
        store.release("e/sem", "p1").await.unwrap(),
        Checked::ExpiredReported
    );
    assert!(matches!(
        store
            .acquire(&permit("e/sem", "p4", 10_000, 2))
            .await
            .unwrap(),
        Acquired::Blocked(Blocked { expired: 0, .. })
    ));

    // Permits dropped by their holders' own first renewal and release.
    for (token, first_ask) in [("q1", "renew"), ("q2", "release")] {
        assert!(matches!(
            store
                .acquire(&permit("e/own", token, t.ttl(200), 2))
                .await
                .unwrap(),
            Acquired::Granted { .. }
        ));
        t.sleep(300).await;
        let first = match first_ask {
            "renew" => format!("{:?}", store.renew("e/own", token, None).await.unwrap()),
            _ => format!("{:?}", store.release("e/own", token).await.unwrap()),
        };
        assert_eq!(first, "Expired", "{token}");
        assert_eq!(
            store.renew("e/own", token, None).await.unwrap(),
            Checked::ExpiredReported,
            "{token}"
        );
        assert_eq!(
            store.release("e/own", token).await.unwrap(),
            Checked::ExpiredReported,
            "{token}"
        );
    }
}

/// A look at a lease says whether it lives, without extending it.
async fn a_look_does_not_extend(store: &Store, t: Timing) {
    let fence = grant(store, "a", "t1", t.ttl(1_000)).await;
    t.sleep(400).await;
    assert_eq!(
        store.check("a", "t1").await.unwrap(),
        Checked::Done(Renewed {
            ttl_ms: t.ttl(1_000),
            fence
        })
    );
    let left = store.describe("a").await.unwrap().lease.expect("held");
    assert!(
        left.remaining_ms <= t.ms(700),
        "the look extended it: {left:?}"
    );
    assert_eq!(
        store.check("a", "intruder").await.unwrap(),
        Checked::NotOwner { fence }
    );
    assert_eq!(store.check("b", "t1").await.unwrap(), Checked::NotHeld);
}

/// A lock and a semaphore on one name share one fence sequence, whichever
/// comes first.
async fn locks_and_semaphores_share_one_fence_sequence(store: &Store, _: Timing) {
    let mut last = 0;
    for round in 0..3 {
        let lock = grant(store, "both", &format!("l{round}"), 5_000).await;
        assert!(lock > last, "lock {lock} after {last}");
        assert_eq!(
            store.release("both", &format!("l{round}")).await.unwrap(),
            Checked::Done(())
        );
        let p = format!("p{round}");
        let permit = match store.acquire(&permit("both", &p, 5_000, 2)).await.unwrap() {
            Acquired::Granted { fence, .. } => fence,
            other @ Acquired::Blocked(_) => panic!("{other:?}"),
        };
        assert!(permit > lock, "permit {permit} after lock {lock}");
        assert_eq!(store.release("both", &p).await.unwrap(), Checked::Done(()));
        last = permit;
    }
}

/// Fences strictly increase per name across releases and expiries, however
/// fast the grants come, and each name has its own sequence.
async fn fences_strictly_increase_per_name(store: &Store, t: Timing) {
    let mut last_a = 0;
    let mut last_b = 0;
    for i in 0..200 {
        let a = grant(store, "a", &format!("a{i}"), 5_000).await;
        let b = grant(store, "b", &format!("b{i}"), 5_000).await;
        assert!(a > last_a, "fence of a went from {last_a} to {a}");
        assert!(b > last_b, "fence of b went from {last_b} to {b}");
        last_a = a;
        last_b = b;
        assert_eq!(
            store.release("a", &format!("a{i}")).await.unwrap(),
            Checked::Done(())
        );
        assert_eq!(
            store.release("b", &format!("b{i}")).await.unwrap(),
            Checked::Done(())
        );
    }
    // After an expiry too.
    grant(store, "a", "short", t.ttl(100)).await;
    t.sleep(200).await;
    assert!(grant(store, "a", "after", 5_000).await > last_a);
}

/// Describe tells holder, fence, TTL, remaining time and grant time.
async fn describe_reports_the_lease(store: &Store, _: Timing) {
    assert_eq!(store.describe("a").await.unwrap().lease, None);
    let before = common::unix_ms();
    let fence = grant(store, "a", "t1", 2_000).await;
    let info = store.describe("a").await.unwrap().lease.expect("held");
    assert_eq!(info.holder, "holder-t1");
    assert_eq!(info.fence, fence);
    assert_eq!(info.ttl_ms, 2_000);
    assert!(info.remaining_ms > 0 && info.remaining_ms <= 2_000);
    // Same host, so the store clock is ours give or take a second.
    assert!(
        info.granted_at_unix_ms + 1_000 >= before && info.granted_at_unix_ms <= before + 1_000,
        "{info:?}"
    );
}

/// A waiter's watch (its place in line taken, as a waiting Acquire's
/// first attempt takes it) is woken by a release of its name, and not by
/// other names.
async fn release_wakes_watchers(store: &Store, _: Timing) {
    grant(store, "a", "t1", 10_000).await;
    grant(store, "b", "t2", 10_000).await;
    assert!(matches!(
        store
            .acquire(&waiting(spec("a", "w", 10_000)))
            .await
            .unwrap(),
        Acquired::Blocked(_)
    ));
    let watch = store.watch("a", Event::Released, Some("w")).await.unwrap();
    assert_eq!(store.local_waiters("a"), 1);
    {
        let notified = watch.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();

        store.release("b", "t2").await.unwrap();
        assert!(
            tokio::time::timeout(Duration::from_millis(300), notified.as_mut())
                .await
                .is_err(),
            "a release of b woke a watcher of a"
        );
        store.release("a", "t1").await.unwrap();
        tokio::time::timeout(Duration::from_secs(5), notified)
            .await
            .expect("the release of a woke its watcher");
    }
    drop(watch);
    assert_eq!(store.local_waiters("a"), 0);
}

/// Acquiring again with the token of the current lease returns that grant
/// (a retried call must not report the lock as held by someone else).
async fn acquire_is_idempotent_for_its_own_token(store: &Store, _: Timing) {
    let fence = grant(store, "a", "t1", 5_000).await;
    assert_eq!(grant(store, "a", "t1", 5_000).await, fence);
    assert!(matches!(
        store.acquire(&spec("a", "t2", 5_000)).await.unwrap(),
        Acquired::Blocked(Blocked {
            by: BlockedBy::Holder,
            ..
        })
    ));
}

fn delayed(spec: GrantSpec, lock_delay_ms: u64) -> GrantSpec {
    GrantSpec {
        lock_delay_ms,
        ..spec
    }
}

/// After a lease with a lock-delay expires, nobody gets the name until the
/// delay ends; then the next grant has a higher fence.
async fn lock_delay_follows_an_expiry(store: &Store, t: Timing) {
    let first = match store
        .acquire(&delayed(spec("a", "t1", t.ttl(200)), t.ttl(600)))
        .await
        .unwrap()
    {
        Acquired::Granted { fence, .. } => fence,
        other @ Acquired::Blocked(_) => panic!("{other:?}"),
    };
    t.sleep(300).await;
    let described = store.describe("a").await.unwrap();
    assert_eq!(described.lease, None, "the lease itself has expired");
    assert!(
        described.lock_delay_remaining_ms > 0 && described.lock_delay_remaining_ms <= t.ms(600),
        "{described:?}"
    );
    match store.acquire(&spec("a", "t2", 1_000)).await.unwrap() {
        Acquired::Blocked(Blocked {
            by: BlockedBy::LockDelay,
            fence,
            remaining_ms,
            ..
        }) => {
            assert_eq!(fence, first);
            assert!(remaining_ms > 0 && remaining_ms <= t.ms(600));
        }
        other => panic!("granted during the lock-delay: {other:?}"),
    }
    assert_eq!(
        store.renew("a", "t1", None).await.unwrap(),
        Checked::Expired,
        "the expired lease stays dead"
    );
    t.sleep(600).await;
    assert!(grant(store, "a", "t2", 1_000).await > first);
}

/// A release is voluntary: it starts no lock-delay.
async fn a_release_starts_no_lock_delay(store: &Store, _: Timing) {
    assert!(matches!(
        store
            .acquire(&delayed(spec("a", "t1", 5_000), 5_000))
            .await
            .unwrap(),
        Acquired::Granted { .. }
    ));
    assert_eq!(store.release("a", "t1").await.unwrap(), Checked::Done(()));
    assert_eq!(
        store.describe("a").await.unwrap().lock_delay_remaining_ms,
        0
    );
    grant(store, "a", "t2", 1_000).await;
}

/// Revoke ends a lease: its holder is told REVOKED (also after the lock was
/// granted again), the next grant has a higher fence, a repeated revoke
/// reports the first one's work, and a free name has nothing to revoke.
async fn revoke_ends_a_lease_and_tells_its_holder(store: &Store, _: Timing) {
    assert_eq!(store.revoke("a").await.unwrap(), Revocation::NotHeld);
    let fence = grant(store, "a", "t1", 10_000).await;
    let watch = store.watch("a", Event::Released, Some("w")).await.unwrap();
    let notified = watch.notified();
    tokio::pin!(notified);
    notified.as_mut().enable();
    assert_eq!(
        store.revoke("a").await.unwrap(),
        Revocation::Revoked { fence }
    );
    tokio::time::timeout(Duration::from_secs(5), notified)
        .await
        .expect("revoke wakes waiters");
    assert_eq!(
        store.revoke("a").await.unwrap(),
        Revocation::Already { fence }
    );
    assert_eq!(
        store.renew("a", "t1", None).await.unwrap(),
        Checked::Revoked { fence }
    );
    assert_eq!(
        store.release("a", "t1").await.unwrap(),
        Checked::Revoked { fence }
    );
    assert_eq!(store.describe("a").await.unwrap().lease, None);
    let next = grant(store, "a", "t2", 10_000).await;
    assert!(next > fence);
    // The revoked holder still hears why, not "granted to another owner".
    assert!(matches!(
        store.renew("a", "t1", None).await.unwrap(),
        Checked::Revoked { .. }
    ));
    assert_eq!(
        store.revoke("a").await.unwrap(),
        Revocation::Revoked { fence: next }
    );
}

/// Revoking a lease with a lock-delay starts the delay at once.
async fn revoke_starts_the_lock_delay(store: &Store, t: Timing) {
    assert!(matches!(
        store
            .acquire(&delayed(spec("a", "t1", 10_000), t.ttl(400)))
            .await
            .unwrap(),
        Acquired::Granted { .. }
    ));
    assert!(matches!(
        store.revoke("a").await.unwrap(),
        Revocation::Revoked { .. }
    ));
    assert!(matches!(
        store.acquire(&spec("a", "t2", 1_000)).await.unwrap(),
        Acquired::Blocked(Blocked {
            by: BlockedBy::LockDelay,
            ..
        })
    ));
    t.sleep(500).await;
    grant(store, "a", "t2", 1_000).await;
}

/// A grant wakes the watchers of the name's grants (election observers).
async fn a_grant_wakes_grant_watchers(store: &Store, _: Timing) {
    let watch = store.watch("a", Event::Granted, None).await.unwrap();
    assert_eq!(store.local_waiters("a"), 0, "an observer is not a waiter");
    let notified = watch.notified();
    tokio::pin!(notified);
    notified.as_mut().enable();
    grant(store, "b", "t1", 10_000).await;
    assert!(
        tokio::time::timeout(Duration::from_millis(300), notified.as_mut())
            .await
            .is_err(),
        "a grant of b woke a watcher of a"
    );
    grant(store, "a", "t1", 10_000).await;
    tokio::time::timeout(Duration::from_secs(5), notified)
        .await
        .expect("the grant of a woke its watcher");
}

fn waiting(spec: GrantSpec) -> GrantSpec {
    GrantSpec {
        queued: true,
        ..spec
    }
}

/// An attempt's refusal as (why, the caller's position, the line's length).
fn place(outcome: Acquired) -> (BlockedBy, u64, u64) {
    match outcome {
        Acquired::Blocked(b) => (b.by, b.position, b.queued),
        granted @ Acquired::Granted { .. } => panic!("{granted:?}"),
    }
}

/// Waiters are served in arrival order: a free lock goes to the first in
/// line, a later waiter or a caller trying once is refused meanwhile, and a
/// waiter that leaves lets the next one in at once.
async fn waiters_are_served_in_arrival_order(store: &Store, _: Timing) {
    let holder = grant(store, "a", "t0", 10_000).await;
    assert_eq!(
        place(
            store
                .acquire(&waiting(spec("a", "w1", 1_000)))
                .await
                .unwrap()
        ),
        (BlockedBy::Holder, 1, 1)
    );
    assert_eq!(
        place(
            store
                .acquire(&waiting(spec("a", "w2", 1_000)))
                .await
                .unwrap()
        ),
        (BlockedBy::Holder, 2, 2)
    );
    assert_eq!(
        place(
            store
                .acquire(&waiting(spec("a", "w3", 1_000)))
                .await
                .unwrap()
        ),
        (BlockedBy::Holder, 3, 3)
    );
    // Coming back keeps one's place.
    assert_eq!(
        place(
            store
                .acquire(&waiting(spec("a", "w2", 1_000)))
                .await
                .unwrap()
        ),
        (BlockedBy::Holder, 2, 3)
    );
    assert_eq!(store.describe("a").await.unwrap().waiters, 3);

    store.release("a", "t0").await.unwrap();
    // Free, but w1 comes first: w2, w3 and a try are refused.
    assert_eq!(
        place(
            store
                .acquire(&waiting(spec("a", "w2", 1_000)))
                .await
                .unwrap()
        ),
        (BlockedBy::Queue, 2, 3)
    );
    assert_eq!(
        place(store.acquire(&spec("a", "try", 1_000)).await.unwrap()),
        (BlockedBy::Queue, 0, 3)
    );
    // w1 leaves the line (its call ended): w2 is next, and gets it.
    store.dequeue("a", "w1").await.unwrap();
    assert_eq!(
        place(
            store
                .acquire(&waiting(spec("a", "w3", 1_000)))
                .await
                .unwrap()
        ),
        (BlockedBy::Queue, 2, 2)
    );
    let w2 = grant(store, "a", "w2", 1_000).await;
    assert!(w2 > holder);
    assert_eq!(store.describe("a").await.unwrap().waiters, 1);
    store.release("a", "w2").await.unwrap();
    grant(store, "a", "w3", 1_000).await;
    assert_eq!(
        store.describe("a").await.unwrap().waiters,
        0,
        "the queue is empty again"
    );
}

/// A release wakes the waiter first in line (and every observer), not the
/// waiters behind it, who could not take the lock; when the first leaves
/// the line, the next is woken.
async fn a_release_wakes_only_the_first_in_line(store: &Store, _: Timing) {
    use futures_util::FutureExt;
    const FIRST: &str = "1111111111111111aaaaaaaaaaaaaaaa";
    const SECOND: &str = "2222222222222222bbbbbbbbbbbbbbbb";
    grant(store, "a", "t0", 10_000).await;
    for token in [FIRST, SECOND] {
        let blocked = store.acquire(&waiting(spec("a", token, 1_000))).await;
        assert!(matches!(blocked, Ok(Acquired::Blocked(_))), "{blocked:?}");
    }
    let first = store
        .watch("a", Event::Released, Some(FIRST))
        .await
        .unwrap();
    let second = store
        .watch("a", Event::Released, Some(SECOND))
        .await
        .unwrap();
    let observer = store.watch("a", Event::Released, None).await.unwrap();
    assert_eq!(store.local_waiters("a"), 2);

    store.release("a", "t0").await.unwrap();
    // One event reaches the three watches at once: once the observer has it,
    // the others have had it too, or never will.
    tokio::time::timeout(Duration::from_secs(5), observer.notified())
        .await
        .expect("the release reached the observer");
    assert!(
        first.notified().now_or_never().is_some(),
        "first in line woken"
    );
    assert!(
        second.notified().now_or_never().is_none(),
        "the second in line was woken by a release it could not use"
    );

    // The first gives up its place: the second is next, and is woken.
    store.dequeue("a", FIRST).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), second.notified())
        .await
        .expect("the next in line is woken when the first leaves");
    grant(store, "a", SECOND, 1_000).await;
    assert_eq!(store.describe("a").await.unwrap().waiters, 0);
}

/// A replica refreshes the places of its waiters on a name in one call
/// (`Store::refresh_places`): each is kept, and told its rank (0: first in
/// line); a token without a place is told so, and gets none.
async fn refreshing_places_tells_each_its_rank(store: &Store, _: Timing) {
    grant(store, "a", "t0", 10_000).await;
    for token in ["w1", "w2", "w3"] {
        store
            .acquire(&waiting(spec("a", token, 1_000)))
            .await
            .unwrap();
    }
    let tokens = |names: &[&str]| names.iter().map(ToString::to_string).collect::<Vec<_>>();
    assert_eq!(
        store
            .refresh_places("a", &tokens(&["w3", "w1", "stranger", "w2"]))
            .await
            .unwrap(),
        [Some(2), Some(0), None, Some(1)]
    );
    assert_eq!(
        store.describe("a").await.unwrap().waiters,
        3,
        "a refresh joins nobody"
    );
    store.dequeue("a", "w1").await.unwrap();
    assert_eq!(
        store
            .refresh_places("a", &tokens(&["w1", "w2", "w3"]))
            .await
            .unwrap(),
        [None, Some(0), Some(1)]
    );
    assert_eq!(
        store
            .refresh_places("nobody-waits", &tokens(&["w2"]))
            .await
            .unwrap(),
        [None]
    );
}

/// A long line with waiters leaving from its middle: every waiter's
/// position is its rank among those still in line (the memory store's rank
/// tree is renumbered several times on the way), and the lock goes to them
/// in arrival order.
async fn a_long_line_keeps_its_order(store: &Store, _: Timing) {
    const N: usize = 300;
    const TTL: u64 = 120_000;
    grant(store, "long", "t0", TTL).await;
    let token = |i: usize| format!("{i:016x}{i:016x}");
    // 400 calls take seconds on a loaded machine, longer than a place lasts
    // unrefreshed (QUEUE_LIFETIME): the places are refreshed on the way, as
    // a broker does for its waiters. Without it CI saw 180 in line where
    // 196 had stayed.
    let mut refreshed = Instant::now();
    for i in 0..N {
        if refreshed.elapsed() >= QUEUE_REFRESH {
            let so_far: Vec<String> = (0..i).filter(|j| j % 3 != 1).map(token).collect();
            store.refresh_places("long", &so_far).await.unwrap();
            refreshed = Instant::now();
        }
        // Behind those who arrived before and stayed.
        let behind = (0..i).filter(|j| j % 3 != 1).count() as u64 + 1;
        match store.acquire(&waiting(spec("long", &token(i), TTL))).await {
            Ok(Acquired::Blocked(b)) => assert_eq!((b.position, b.queued), (behind, behind)),
            other => panic!("{other:?}"),
        }
        // Every third leaves at once, before the next arrives.
        if i % 3 == 1 {
            store.dequeue("long", &token(i)).await.unwrap();
        }
    }
    let staying: Vec<String> = (0..N).filter(|i| i % 3 != 1).map(token).collect();
    let ranks = store.refresh_places("long", &staying).await.unwrap();
    assert_eq!(
        ranks,
        (0..staying.len() as u64).map(Some).collect::<Vec<_>>()
    );
    assert_eq!(
        store.describe("long").await.unwrap().waiters,
        staying.len() as u64
    );
    store.release("long", "t0").await.unwrap();
    // Only the first in line may take it, then the next, and so on.
    let mut refreshed = Instant::now();
    for (i, next) in staying.iter().enumerate().take(20) {
        if refreshed.elapsed() >= QUEUE_REFRESH {
            store.refresh_places("long", &staying[i..]).await.unwrap();
            refreshed = Instant::now();
        }
        if let Some(later) = staying.get(i + 1) {
            assert!(
                matches!(
                    store.acquire(&waiting(spec("long", later, TTL))).await,
                    Ok(Acquired::Blocked(_))
                ),
                "{later} jumped the line"
            );
        }
        grant(store, "long", next, TTL).await;
        store.release("long", next).await.unwrap();
    }
}

/// A place in line its waiter stopped refreshing (a place kept after a
/// wait ran out, or one whose dequeue failed) lapses within the contract's
/// lifetime of a place: the line moves on, and the name is granted to a
/// caller behind it. A place kept refreshed stays. (On ZooKeeper a place is
/// an ephemeral node of the broker's session, which would otherwise hold
/// the line for the broker's whole life.)
async fn an_unrefreshed_place_lapses(store: &Store, t: Timing) {
    grant(store, "q", "t0", 60_000).await;
    grant(store, "r", "t0", 60_000).await;
    for name in ["q", "r"] {
        let blocked = store.acquire(&waiting(spec(name, "gone", 60_000))).await;
        assert!(matches!(blocked, Ok(Acquired::Blocked(_))), "{blocked:?}");
    }
    store.release("q", "t0").await.unwrap();
    store.release("r", "t0").await.unwrap();
    // Still first in line: a try behind it is refused.
    assert_eq!(
        place(store.acquire(&spec("q", "next", 1_000)).await.unwrap()),
        (BlockedBy::Queue, 0, 1)
    );
    // "gone" stops refreshing its place on "q"; on "r" it goes on.
    let lapsed_by = Instant::now() + QUEUE_LIFETIME + QUEUE_REFRESH * 2 + t.wait(0);
    while Instant::now() < lapsed_by {
        let ranks = store
            .refresh_places("r", &["gone".to_owned()])
            .await
            .unwrap();
        assert_eq!(ranks, [Some(0)], "a refreshed place stays");
        tokio::time::sleep(QUEUE_REFRESH).await;
    }
    grant(store, "q", "next", 1_000).await;
    assert_eq!(
        place(store.acquire(&spec("r", "next", 1_000)).await.unwrap()),
        (BlockedBy::Queue, 0, 1),
        "the refreshed place still comes first"
    );
}

/// A batch renewal answers every lease, in order, whatever its outcome, over
/// several script runs (a batch above 250 leases) in one call.
///
/// The leases are granted for a minute, so that none has expired by the
/// time the 600th is granted, on a store whose grants are two fsync'd
/// writes each (ZooKeeper) on a loaded machine; the renewal to 8 s shows
/// in the TTL and the time left.
async fn renew_many_answers_each_lease_in_order(store: &Store, t: Timing) {
    use leasehold_server::store::RenewItem;
    const N: usize = 600;
    let mut items = Vec::new();
    let mut fences = Vec::new();
    for i in 0..N {
        let name = format!("batch/{i}");
        fences.push(grant(store, &name, &format!("t{i}"), t.ttl(60_000)).await);
        items.push(RenewItem {
            name,
            token: format!("t{i}"),
            ttl_ms: Some(t.ttl(8_000)),
        });
    }
    // Spoil a few, on both sides of the 250-lease script boundary.
    items[3].token = "intruder".into();
    store.release("batch/251", "t251").await.unwrap();
    items[599].name = "batch/never-held".into();

    let outcomes = store.renew_many(&items).await.unwrap();
    assert_eq!(outcomes.len(), N);
    for (i, outcome) in outcomes.iter().enumerate() {
        let expected = match i {
            3 => Checked::NotOwner { fence: fences[3] },
            251 => Checked::Released,
            599 => Checked::NotHeld,
            _ => Checked::Done(Renewed {
                ttl_ms: t.ttl(8_000),
                fence: fences[i],
            }),
        };
        assert_eq!(*outcome, expected, "lease {i}");
    }
    let info = store
        .describe("batch/300")
        .await
        .unwrap()
        .lease
        .expect("held");
    assert_eq!(info.ttl_ms, t.ttl(8_000));
    assert!(
        (t.ms(5_000)..=t.ms(8_000)).contains(&info.remaining_ms),
        "{info:?}"
    );

    // A heartbeat's usual renewal: each lease keeps its own TTL.
    let keep: Vec<RenewItem> = (0..N)
        .filter(|i| ![3, 251, 599].contains(i))
        .map(|i| RenewItem {
            name: format!("batch/{i}"),
            token: format!("t{i}"),
            ttl_ms: None,
        })
        .collect();
    let outcomes = store.renew_many(&keep).await.unwrap();
    for (item, outcome) in keep.iter().zip(&outcomes) {
        assert!(
            matches!(outcome, Checked::Done(Renewed { ttl_ms, .. }) if *ttl_ms == t.ttl(8_000)),
            "{}: {outcome:?}",
            item.name
        );
    }
}

fn permit(name: &str, token: &str, ttl_ms: u64, limit: u32) -> GrantSpec {
    GrantSpec {
        limit,
        ..spec(name, token, ttl_ms)
    }
}

/// A semaphore grants up to its limit, each permit with its own token and a
/// rising fence; a release or an expiry frees one permit; permits renew and
/// release like leases; and a lock and a semaphore never share a name.
async fn a_semaphore_grants_up_to_its_limit(store: &Store, t: Timing) {
    let mut fences = Vec::new();
    for t in ["p1", "p2", "p3"] {
        match store.acquire(&permit("s", t, 10_000, 3)).await.unwrap() {
            Acquired::Granted { fence, .. } => fences.push(fence),
            other @ Acquired::Blocked(_) => panic!("{t}: {other:?}"),
        }
    }
    assert!(fences.windows(2).all(|w| w[1] > w[0]), "{fences:?}");
    assert!(matches!(
        store.acquire(&permit("s", "p4", 10_000, 3)).await.unwrap(),
        Acquired::Blocked(Blocked {
            by: BlockedBy::Holder,
            ..
        })
    ));
    let described = store.describe("s").await.unwrap();
    assert_eq!((described.lease, described.permits), (None, 3));
    // A plain lock on the name is refused while permits are held.
    assert!(matches!(
        store.acquire(&spec("s", "lock", 1_000)).await.unwrap(),
        Acquired::Blocked(_)
    ));

    assert_eq!(
        store.renew("s", "p2", Some(5_000)).await.unwrap(),
        Checked::Done(Renewed {
            ttl_ms: 5_000,
            fence: fences[1]
        })
    );
    assert_eq!(store.release("s", "p2").await.unwrap(), Checked::Done(()));
    assert_eq!(store.release("s", "p2").await.unwrap(), Checked::Released);
    let p4 = match store
        .acquire(&permit("s", "p4", t.ttl(300), 3))
        .await
        .unwrap()
    {
        Acquired::Granted { fence, .. } => fence,
        other @ Acquired::Blocked(_) => panic!("a released permit was not freed: {other:?}"),
    };
    assert!(p4 > fences[2]);
    // Expiry frees a permit too.
    t.sleep(450).await;
    assert_eq!(
        store.renew("s", "p4", None).await.unwrap(),
        Checked::Expired
    );
    assert_eq!(
        store.renew("s", "p4", None).await.unwrap(),
        Checked::ExpiredReported
    );
    assert!(matches!(
        store.acquire(&permit("s", "p5", 10_000, 3)).await.unwrap(),
        Acquired::Granted { .. }
    ));
    assert_eq!(store.describe("s").await.unwrap().permits, 3);
}

/// Each lease's end is remembered for its own token, however many leases of
/// the name came and went after it: released locks and permits are told
/// "released", revoked ones "revoked" with their own fence, and a stranger's
/// token is told nothing of them.
async fn ends_are_remembered_per_token(store: &Store, _: Timing) {
    for token in ["r1", "r2", "r3"] {
        grant(store, "handed", token, 10_000).await;
        assert_eq!(
            store.release("handed", token).await.unwrap(),
            Checked::Done(())
        );
    }
    for token in ["r1", "r2", "r3"] {
        assert_eq!(
            store.renew("handed", token, None).await.unwrap(),
            Checked::Released,
            "{token}"
        );
        assert_eq!(
            store.release("handed", token).await.unwrap(),
            Checked::Released,
            "{token}"
        );
    }
    assert_eq!(
        store.renew("handed", "stranger", None).await.unwrap(),
        Checked::NotHeld
    );

    for token in ["p1", "p2"] {
        assert!(matches!(
            store
                .acquire(&permit("permits", token, 10_000, 2))
                .await
                .unwrap(),
            Acquired::Granted { .. }
        ));
    }
    for token in ["p1", "p2"] {
        assert_eq!(
            store.release("permits", token).await.unwrap(),
            Checked::Done(())
        );
    }
    for token in ["p1", "p2"] {
        assert_eq!(
            store.check("permits", token).await.unwrap(),
            Checked::Released,
            "{token}"
        );
    }

    let first = grant(store, "revoked", "v1", 10_000).await;
    assert_eq!(
        store.revoke("revoked").await.unwrap(),
        Revocation::Revoked { fence: first }
    );
    let second = grant(store, "revoked", "v2", 10_000).await;
    assert_eq!(
        store.revoke("revoked").await.unwrap(),
        Revocation::Revoked { fence: second }
    );
    grant(store, "revoked", "v3", 10_000).await;
    assert_eq!(
        store.release("revoked", "v3").await.unwrap(),
        Checked::Done(())
    );
    assert_eq!(
        store.renew("revoked", "v1", None).await.unwrap(),
        Checked::Revoked { fence: first }
    );
    assert_eq!(
        store.check("revoked", "v2").await.unwrap(),
        Checked::Revoked { fence: second }
    );
}

/// A permit's release is remembered for its token even once the name is
/// held as a lock: a retried release succeeds again, it does not hear that
/// another owner holds the name (found by the model checker: the Redis
/// store looked at the lock's records only while a lock held the name).
async fn a_released_permit_stays_released_under_a_lock(store: &Store, _: Timing) {
    assert!(matches!(
        store
            .acquire(&permit("mixed", "p1", 10_000, 2))
            .await
            .unwrap(),
        Acquired::Granted { .. }
    ));
    assert_eq!(
        store.release("mixed", "p1").await.unwrap(),
        Checked::Done(())
    );
    grant(store, "mixed", "l1", 10_000).await;
    assert_eq!(
        store.release("mixed", "p1").await.unwrap(),
        Checked::Released
    );
    // And the other way round: a lock's release, then permits on the name.
    assert_eq!(
        store.release("mixed", "l1").await.unwrap(),
        Checked::Done(())
    );
    assert!(matches!(
        store
            .acquire(&permit("mixed", "p2", 10_000, 2))
            .await
            .unwrap(),
        Acquired::Granted { .. }
    ));
    assert_eq!(
        store.release("mixed", "l1").await.unwrap(),
        Checked::Released
    );
}

/// A permit's own end is its token's answer under a lock granted after it:
/// an expired permit (found expired, still in the store, when a lock is
/// granted on the name) hears "expired", once, and a released one
/// "released", never that another owner holds the name (found by the model
/// checker: a KeepAlive stream's next heartbeat for an expired permit was
/// told "not owner", and its broker counted a store loss that never
/// happened). The lock grant reports the expired permit (`expired`), so its
/// holder hears that the loss was reported already.
async fn a_permit_ended_before_a_lock_is_its_own_end(store: &Store, t: Timing) {
    for (token, ttl_ms) in [("p1", 300), ("p2", 10_000)] {
        assert!(matches!(
            store
                .acquire(&permit("mixed", token, t.ttl(ttl_ms), 2))
                .await
                .unwrap(),
            Acquired::Granted { .. }
        ));
    }
    assert_eq!(
        store.release("mixed", "p2").await.unwrap(),
        Checked::Done(())
    );
    // p1's TTL passes on the store's clock: nobody asks about it meanwhile.
    t.sleep(450).await;
    assert_eq!(store.describe("mixed").await.unwrap().permits, 0);
    let lock = match store.acquire(&spec("mixed", "l1", 10_000)).await.unwrap() {
        Acquired::Granted { fence, expired } => {
            assert_eq!(expired, 1, "the lock grant reports the expired permit");
            fence
        }
        other @ Acquired::Blocked(_) => panic!("a lock on a name whose permits expired: {other:?}"),
    };
    assert_eq!(
        store.renew("mixed", "p1", Some(3_000)).await.unwrap(),
        Checked::ExpiredReported,
        "a heartbeat of the expired permit, under the lock"
    );
    assert_eq!(
        store.check("mixed", "p1").await.unwrap(),
        Checked::ExpiredReported
    );
    let heartbeat = [leasehold_server::store::RenewItem {
        name: "mixed".into(),
        token: "p1".into(),
        ttl_ms: None,
    }];
    assert_eq!(
        store.renew_many(&heartbeat).await.unwrap(),
        [Checked::ExpiredReported]
    );
    assert_eq!(
        store.release("mixed", "p1").await.unwrap(),
        Checked::ExpiredReported
    );
    assert_eq!(
        store.renew("mixed", "p2", None).await.unwrap(),
        Checked::Released,
        "a heartbeat that crossed the permit's release, under the lock"
    );
    assert_eq!(
        store.release("mixed", "p2").await.unwrap(),
        Checked::Released
    );
    // No later grant reports p1 again; a stranger is still a stranger, and
    // the lock is untouched.
    assert_eq!(
        store.check("mixed", "stranger").await.unwrap(),
        Checked::NotOwner { fence: lock }
    );
    assert_eq!(
        store.release("mixed", "stranger").await.unwrap(),
        Checked::NotOwner { fence: lock }
    );
    assert!(matches!(
        store.check("mixed", "l1").await.unwrap(),
        Checked::Done(Renewed { fence, .. }) if fence == lock
    ));
    assert_eq!(
        store.release("mixed", "l1").await.unwrap(),
        Checked::Done(())
    );
    assert!(matches!(
        store.acquire(&spec("mixed", "l2", 10_000)).await.unwrap(),
        Acquired::Granted { expired: 0, .. }
    ));
}

/// A revoke finds nothing to revoke once the lease it would end was
/// released, even if an earlier lease of the name was revoked; a repeated
/// revoke of a lease still reports that lease's fence.
async fn a_revoke_after_a_release_finds_nothing(store: &Store, _: Timing) {
    let revoked = grant(store, "a", "t1", 10_000).await;
    assert_eq!(
        store.revoke("a").await.unwrap(),
        Revocation::Revoked { fence: revoked }
    );
    grant(store, "a", "t2", 10_000).await;
    assert_eq!(store.release("a", "t2").await.unwrap(), Checked::Done(()));
    assert_eq!(store.revoke("a").await.unwrap(), Revocation::NotHeld);
    let next = grant(store, "a", "t3", 10_000).await;
    assert_eq!(
        store.revoke("a").await.unwrap(),
        Revocation::Revoked { fence: next }
    );
    assert_eq!(
        store.revoke("a").await.unwrap(),
        Revocation::Already { fence: next }
    );
}

/// A released lease's record lasts the 10 s linger after the release,
/// whatever its TTL: a one-hour lease released at once is forgotten (its
/// token is told "not held") 10 s later, not an hour later.
async fn a_released_lease_is_forgotten_after_the_linger(store: &Store, t: Timing) {
    grant(store, "hour", "t1", 3_600_000).await;
    assert_eq!(
        store.release("hour", "t1").await.unwrap(),
        Checked::Done(())
    );
    assert_eq!(store.check("hour", "t1").await.unwrap(), Checked::Released);
    // The linger (10 s) and a margin for a loaded machine; the memory
    // store's tests run on a real clock too.
    tokio::time::sleep(t.after_linger()).await;
    assert_eq!(
        store.release("hour", "t1").await.unwrap(),
        Checked::NotHeld,
        "still remembered past the linger"
    );
}

/// A lock-delay means nobody gets the name: not a lock, nor a semaphore
/// permit, after an expiry as after a revoke.
async fn a_lock_delay_holds_off_semaphore_permits_too(store: &Store, t: Timing) {
    assert!(matches!(
        store
            .acquire(&delayed(spec("a", "t1", t.ttl(500)), 60_000))
            .await
            .unwrap(),
        Acquired::Granted { .. }
    ));
    t.sleep(700).await;
    let refused = store.acquire(&permit("a", "p1", 10_000, 2)).await.unwrap();
    assert!(
        matches!(
            refused,
            Acquired::Blocked(Blocked {
                by: BlockedBy::LockDelay,
                ..
            })
        ),
        "after an expiry: {refused:?}"
    );
    assert!(matches!(
        store
            .acquire(&delayed(spec("b", "t1", 10_000), 60_000))
            .await
            .unwrap(),
        Acquired::Granted { .. }
    ));
    assert!(matches!(
        store.revoke("b").await.unwrap(),
        Revocation::Revoked { .. }
    ));
    let refused = store.acquire(&permit("b", "p1", 10_000, 2)).await.unwrap();
    assert!(
        matches!(
            refused,
            Acquired::Blocked(Blocked {
                by: BlockedBy::LockDelay,
                ..
            })
        ),
        "after a revoke: {refused:?}"
    );
}

/// Every page of a walk over `prefix`, `budget` names a call: the entries
/// in order, after checking each page is in name order and within its
/// budget, and that the walk ends.
async fn walk(store: &Store, prefix: &str, budget: usize) -> Vec<Listed> {
    let (mut entries, mut resume, mut calls) = (Vec::new(), None::<String>, 0);
    loop {
        let page = store
            .list(prefix, resume.as_deref(), budget)
            .await
            .expect("store answers");
        assert!(
            page.entries.len() <= budget,
            "{} > {budget}",
            page.entries.len()
        );
        assert!(
            page.entries.windows(2).all(|w| w[0].name < w[1].name),
            "a page out of name order: {:?}",
            page.entries.iter().map(|e| &e.name).collect::<Vec<_>>()
        );
        entries.extend(page.entries);
        calls += 1;
        assert!(calls < 2_000, "the walk of {prefix:?} does not end");
        match page.next {
            Some(next) => resume = Some(next),
            None => return entries,
        }
    }
}

/// The names of `entries`, each once, sorted.
fn names(entries: &[Listed]) -> Vec<String> {
    let set: std::collections::BTreeSet<_> = entries.iter().map(|e| e.name.clone()).collect();
    set.into_iter().collect()
}

/// A listing shows the names with something on them (a lease, permits,
/// waiters) under the prefix, each as Describe tells it, and leaves out
/// free names (released ones included) and names outside the prefix.
async fn a_listing_shows_what_is_on_each_name(store: &Store, _: Timing) {
    let a = grant(store, "l/a", "t1", 10_000).await;
    let b = grant(store, "l/b", "t2", 10_000).await;
    for token in ["p1", "p2"] {
        let granted = store
            .acquire(&permit("l/s", token, 10_000, 3))
            .await
            .unwrap();
        assert!(matches!(granted, Acquired::Granted { .. }), "{granted:?}");
    }
    let blocked = store
        .acquire(&waiting(spec("l/a", "w1", 10_000)))
        .await
        .unwrap();
    assert!(matches!(blocked, Acquired::Blocked(_)), "{blocked:?}");
    grant(store, "l/gone", "t3", 10_000).await;
    assert_eq!(
        store.release("l/gone", "t3").await.unwrap(),
        Checked::Done(())
    );
    grant(store, "other/x", "t4", 10_000).await;

    let entries = walk(store, "l/", 100).await;
    assert_eq!(names(&entries), ["l/a", "l/b", "l/s"]);
    let entry = |name: &str| &entries.iter().find(|e| e.name == name).unwrap().described;
    let lease = entry("l/a").lease.clone().expect("l/a is held");
    assert_eq!((lease.holder.as_str(), lease.fence), ("holder-t1", a));
    assert!(
        lease.remaining_ms > 0 && lease.remaining_ms <= 10_000,
        "{lease:?}"
    );
    assert_eq!(lease.ttl_ms, store.applied_ms(10_000));
    assert_eq!(entry("l/a").waiters, 1);
    assert_eq!(entry("l/b").lease.as_ref().map(|l| l.fence), Some(b));
    assert_eq!(entry("l/b").waiters, 0);
    assert_eq!(
        (entry("l/s").lease.as_ref(), entry("l/s").permits),
        (None, 2)
    );
    // Each entry is what Describe says of the name.
    for e in &entries {
        let described = store.describe(&e.name).await.unwrap();
        assert_eq!(
            described.lease.map(|l| l.fence),
            e.described.lease.as_ref().map(|l| l.fence)
        );
        assert_eq!(
            (described.waiters, described.permits),
            (e.described.waiters, e.described.permits)
        );
    }
    // The empty prefix lists every name.
    assert_eq!(
        names(&walk(store, "", 100).await),
        ["l/a", "l/b", "l/s", "other/x"]
    );
}

/// A listing of many names in small pages lists every one of them (in no
/// page more than its budget), and only them.
async fn a_listing_walks_every_name_in_bounded_pages(store: &Store, _: Timing) {
    let held: Vec<String> = (0..150).map(|i| format!("p/{i:03}")).collect();
    for (i, name) in held.iter().enumerate() {
        grant(store, name, &format!("t{i}"), 30_000).await;
    }
    grant(store, "q/1", "q", 30_000).await;
    for budget in [1, 7, 1_000] {
        assert_eq!(
            names(&walk(store, "p/", budget).await),
            held,
            "budget {budget}"
        );
    }
}

/// A prefix is matched as written: `_`, `.` and the other name characters
/// are no wildcards in any store's pattern syntax.
async fn a_listing_prefix_is_no_pattern(store: &Store, _: Timing) {
    for (i, name) in ["a_b", "a_b/1", "axb/1", "a.b/1", "aab/1", "a-b:1", "a"]
        .iter()
        .enumerate()
    {
        grant(store, name, &format!("t{i}"), 10_000).await;
    }
    assert_eq!(names(&walk(store, "a_b", 10).await), ["a_b", "a_b/1"]);
    assert_eq!(names(&walk(store, "a.", 10).await), ["a.b/1"]);
    assert_eq!(names(&walk(store, "a-b:", 10).await), ["a-b:1"]);
    assert_eq!(names(&walk(store, "a_b/1", 10).await), ["a_b/1"]);
    assert_eq!(names(&walk(store, "b", 10).await), Vec::<String>::new());
}

/// An expired lease leaves the listing (its name is free), unless its
/// lock-delay runs: then the name is listed free, with the delay's time
/// left.
async fn a_listing_leaves_out_expired_leases(store: &Store, t: Timing) {
    grant(store, "e/plain", "t1", t.ttl(200)).await;
    let delayed_grant = store
        .acquire(&delayed(spec("e/delayed", "t2", t.ttl(200)), t.ttl(5_000)))
        .await
        .unwrap();
    assert!(
        matches!(delayed_grant, Acquired::Granted { .. }),
        "{delayed_grant:?}"
    );
    assert_eq!(
        names(&walk(store, "e/", 10).await),
        ["e/delayed", "e/plain"]
    );
    t.sleep(300).await;
    let entries = walk(store, "e/", 10).await;
    assert_eq!(names(&entries), ["e/delayed"]);
    assert_eq!(entries[0].described.lease, None);
    assert!(
        entries[0].described.lock_delay_remaining_ms > 0,
        "{entries:?}"
    );
}

/// The suite on one backend: a module named after it, one test per
/// contract test, each on a store of its own.
macro_rules! conformance_on {
    ($backend:ident, $variant:ident, [$($test:ident),* $(,)?]) => {
        mod $backend {
            $(
                #[tokio::test]
                async fn $test() {
                    let open = crate::common::backends::Backend::$variant
                        .open("conf:", std::time::Duration::from_secs(2));
                    super::$test(&open.store, open.timing).await;
                }
            )*
        }
    };
}

/// The suite on Redis with the broker writing lease records in the format
/// every broker before format 2 wrote (`--redis-record-format 1`, for a
/// rolling update from one): held to the same contract.
macro_rules! conformance_on_redis_record_format_1 {
    ([$($test:ident),* $(,)?]) => {
        mod redis_record_format_1 {
            $(
                #[tokio::test]
                async fn $test() {
                    let open = crate::common::backends::Backend::open_redis(
                        "conf:",
                        std::time::Duration::from_secs(2),
                        leasehold_server::store::RecordFormat::V1,
                    );
                    super::$test(&open.store, open.timing).await;
                }
            )*
        }
    };
}

/// The suite on every backend of the harness's one list
/// (`common::for_each_backend!`), and on Redis in record format 1.
macro_rules! conformance {
    ($($test:ident),* $(,)?) => {
        common::for_each_backend!(conformance_on, [$($test),*]);
        conformance_on_redis_record_format_1!([$($test),*]);
    };
}

conformance!(
    grant_then_second_acquirer_refused,
    renew_with_right_and_wrong_token,
    release_with_right_and_wrong_token,
    expiry_frees_the_lock,
    fences_strictly_increase_per_name,
    describe_reports_the_lease,
    release_wakes_watchers,
    acquire_is_idempotent_for_its_own_token,
    lock_delay_follows_an_expiry,
    a_release_starts_no_lock_delay,
    revoke_ends_a_lease_and_tells_its_holder,
    revoke_starts_the_lock_delay,
    a_grant_wakes_grant_watchers,
    waiters_are_served_in_arrival_order,
    a_release_wakes_only_the_first_in_line,
    renew_many_answers_each_lease_in_order,
    a_semaphore_grants_up_to_its_limit,
    an_expiry_is_reported_once,
    a_reported_expiry_is_remembered_per_token,
    a_look_does_not_extend,
    locks_and_semaphores_share_one_fence_sequence,
    refreshing_places_tells_each_its_rank,
    a_long_line_keeps_its_order,
    an_unrefreshed_place_lapses,
    ends_are_remembered_per_token,
    a_revoke_after_a_release_finds_nothing,
    a_released_lease_is_forgotten_after_the_linger,
    a_lock_delay_holds_off_semaphore_permits_too,
    a_released_permit_stays_released_under_a_lock,
    a_permit_ended_before_a_lock_is_its_own_end,
    a_listing_shows_what_is_on_each_name,
    a_listing_walks_every_name_in_bounded_pages,
    a_listing_prefix_is_no_pattern,
    a_listing_leaves_out_expired_leases,
);

/// Brokers writing the two Redis record formats on one Redis (a rolling
/// update, and the switch of `--redis-record-format` after it): each reads,
/// renews, releases, revokes and reports the expiry of the other's leases
/// as its own, and writes its own format whenever it writes a record.
mod redis_mixed_record_formats {
    use super::*;
    use leasehold_server::store::{lease_key, read_record, RecordFormat, StoreOptions};

    /// Two stores on one redis-server, writing `first` and `second`.
    struct Pair {
        first: Store,
        second: Store,
        conn: ::redis::aio::MultiplexedConnection,
        _redis: common::RedisServer,
    }

    async fn pair(first: RecordFormat, second: RecordFormat) -> Pair {
        let redis = common::RedisServer::start();
        let open = |format| {
            let mut options = StoreOptions::new("mix:", Duration::from_secs(2));
            options.record_format = format;
            Store::open(&redis.url(), &options).unwrap()
        };
        Pair {
            first: open(first),
            second: open(second),
            conn: redis.connection().await,
            _redis: redis,
        }
    }

    impl Pair {
        /// The format of the record of `name`, and its fence.
        async fn record(&mut self, name: &str) -> Option<(u8, u64)> {
            read_record(&mut self.conn, &lease_key("mix:", name))
                .await
                .unwrap()
                .map(|r| (r.format, r.fence))
        }
    }

    const BOTH: [(RecordFormat, RecordFormat); 2] = [
        (RecordFormat::V1, RecordFormat::V2),
        (RecordFormat::V2, RecordFormat::V1),
    ];

    fn number(format: RecordFormat) -> u8 {
        format.number()
    }

    /// A lease granted in one format is held against the other broker,
    /// renewed by it (its record then in the renewer's format), described,
    /// released by it, and the release is known to both.
    #[tokio::test]
    async fn a_lease_of_either_format_is_the_other_brokers_too() {
        for (w, r) in BOTH {
            let mut p = pair(w, r).await;
            let fence = grant(&p.first, "a", "t1", 5_000).await;
            assert_eq!(p.record("a").await, Some((number(w), fence)));
            match p.second.acquire(&spec("a", "t2", 5_000)).await.unwrap() {
                Acquired::Blocked(held) => {
                    assert_eq!((held.by, held.fence), (BlockedBy::Holder, fence));
                    assert_eq!(held.holder, "holder-t1");
                    assert!(
                        held.remaining_ms > 4_000 && held.remaining_ms <= 5_000,
                        "{held:?}"
                    );
                }
                granted @ Acquired::Granted { .. } => panic!("{w:?} -> {r:?}: {granted:?}"),
            }
            // A renewal that keeps the TTL, then one that changes it.
            assert_eq!(
                p.second.renew("a", "t1", None).await.unwrap(),
                Checked::Done(Renewed {
                    ttl_ms: 5_000,
                    fence
                })
            );
            assert_eq!(
                p.record("a").await,
                Some((number(r), fence)),
                "{w:?} -> {r:?}"
            );
            assert_eq!(
                p.first.renew("a", "t1", Some(8_000)).await.unwrap(),
                Checked::Done(Renewed {
                    ttl_ms: 8_000,
                    fence
                })
            );
            assert_eq!(p.record("a").await, Some((number(w), fence)));
            for store in [&p.first, &p.second] {
                let lease = store.describe("a").await.unwrap().lease.expect("held");
                assert_eq!((lease.fence, lease.ttl_ms), (fence, 8_000));
                assert!(lease.remaining_ms > 7_000, "{lease:?}");
                assert_eq!(
                    store.release("a", "stranger").await.unwrap(),
                    Checked::NotOwner { fence }
                );
            }
            assert_eq!(
                p.second.release("a", "t1").await.unwrap(),
                Checked::Done(())
            );
            assert_eq!(p.first.release("a", "t1").await.unwrap(), Checked::Released);
            assert_eq!(
                p.first.renew("a", "t1", None).await.unwrap(),
                Checked::Released
            );
            assert!(grant(&p.first, "a", "t3", 5_000).await > fence);
        }
    }

    /// An expiry in one format is reported once across both brokers, and
    /// its lock-delay holds on the other; a grant over it by the other
    /// broker replaces the record in its own format.
    #[tokio::test]
    async fn an_expiry_of_either_format_is_reported_once() {
        for (w, r) in BOTH {
            let mut p = pair(w, r).await;
            let spec = delayed(spec("a", "t1", 200), 300);
            let Acquired::Granted { fence, .. } = p.first.acquire(&spec).await.unwrap() else {
                panic!("not granted");
            };
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert!(matches!(
                p.second
                    .acquire(&super::spec("a", "t2", 5_000))
                    .await
                    .unwrap(),
                Acquired::Blocked(Blocked {
                    by: BlockedBy::LockDelay,
                    ..
                })
            ));
            assert_eq!(
                p.second.renew("a", "t1", None).await.unwrap(),
                Checked::Expired
            );
            assert_eq!(
                p.first.renew("a", "t1", None).await.unwrap(),
                Checked::ExpiredReported
            );
            assert_eq!(
                p.first.release("a", "t1").await.unwrap(),
                Checked::ExpiredReported
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
            match p
                .second
                .acquire(&super::spec("a", "t2", 5_000))
                .await
                .unwrap()
            {
                Acquired::Granted {
                    fence: next,
                    expired,
                    ..
                } => {
                    assert!(next > fence);
                    assert_eq!(expired, 0, "{w:?} -> {r:?}: reported twice");
                    assert_eq!(p.record("a").await, Some((number(r), next)));
                }
                blocked @ Acquired::Blocked(_) => panic!("{w:?} -> {r:?}: {blocked:?}"),
            }
            assert_eq!(
                p.first.renew("a", "t1", None).await.unwrap(),
                Checked::ExpiredReported
            );
        }
    }

    /// A revoke by one broker of the other's lease: its tombstone holds off
    /// grants on both during the lock-delay, and both tell the holder.
    #[tokio::test]
    async fn a_revoke_of_either_format_holds_on_both() {
        for (w, r) in BOTH {
            let p = pair(w, r).await;
            let spec = delayed(spec("a", "t1", 10_000), 400);
            let Acquired::Granted { fence, .. } = p.first.acquire(&spec).await.unwrap() else {
                panic!("not granted");
            };
            assert_eq!(
                p.second.revoke("a").await.unwrap(),
                Revocation::Revoked { fence }
            );
            assert_eq!(
                p.first.revoke("a").await.unwrap(),
                Revocation::Already { fence }
            );
            for store in [&p.first, &p.second] {
                assert!(matches!(
                    store.acquire(&super::spec("a", "t2", 5_000)).await.unwrap(),
                    Acquired::Blocked(Blocked {
                        by: BlockedBy::LockDelay,
                        ..
                    })
                ));
                assert_eq!(
                    store.renew("a", "t1", None).await.unwrap(),
                    Checked::Revoked { fence }
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
            assert!(grant(&p.first, "a", "t2", 5_000).await > fence);
        }
    }
}

/// The contract's constants (`store::CONTRACT`, declared once in the
/// broker's Rust code) as the stores' own code has them: read back from the
/// scripts as a real Redis runs them and from the functions as a real
/// PostgreSQL created them.
mod contract_constants {
    use leasehold_server::store::{
        schema_for, Revocation, Store, StoreOptions, CONTRACT, SCRIPTS, SCRIPT_CONSTANTS,
    };

    fn value(name: &str) -> i64 {
        CONTRACT
            .iter()
            .find(|(n, _)| *n == name)
            .unwrap_or_else(|| panic!("{name} is not in CONTRACT"))
            .1
    }

    /// Every script begins with the constants part as filled, and Redis,
    /// running it, has each constant at its Rust value.
    #[tokio::test]
    async fn redis_scripts_have_the_rust_values() {
        let redis = crate::common::RedisServer::start();
        let mut conn = redis.connection().await;
        let names: Vec<&str> = CONTRACT.iter().map(|(name, _)| *name).collect();
        let lua = format!("{}\nreturn {{{}}}", *SCRIPT_CONSTANTS, names.join(", "));
        let values: Vec<i64> = redis::cmd("EVAL")
            .arg(&lua)
            .arg(0)
            .query_async(&mut conn)
            .await
            .expect("the constants part runs");
        let expected: Vec<i64> = CONTRACT.iter().map(|(_, v)| *v).collect();
        assert_eq!(values, expected, "{names:?}");
        let with_constants = SCRIPTS
            .iter()
            .filter(|(_, source)| source.starts_with(SCRIPT_CONSTANTS.as_str()))
            .count();
        assert!(
            with_constants >= 8,
            "{with_constants} scripts include the constants"
        );
        for (file, source) in SCRIPTS.iter() {
            assert!(!source.contains("__"), "{file} has a placeholder left");
        }
    }

    /// The schema's functions have no placeholder left, `linger_ms()` is
    /// LINGER_MS, and a revoke and a release of a name nobody holds answer
    /// REVOKE_NOTHING and LEASE_NOT_HELD.
    #[tokio::test]
    async fn postgres_functions_have_the_rust_values() {
        let postgres = crate::common::PostgresServer::start();
        let options = StoreOptions::new("contract:", std::time::Duration::from_secs(5));
        let store = Store::open(&postgres.url(), &options).expect("open");
        // The first call creates the schema.
        assert_eq!(store.revoke("nobody").await.unwrap(), Revocation::NotHeld);
        let schema = schema_for("contract:").unwrap();
        let linger = postgres
            .psql(&[&format!("SELECT {schema}.linger_ms()")])
            .await;
        assert_eq!(linger, value("LINGER_MS").to_string());
        let left = postgres
            .psql(&[&format!(
                "SELECT count(*) FROM pg_proc WHERE pronamespace = '{schema}'::regnamespace \
                 AND prosrc ~ '__[A-Z]'"
            )])
            .await;
        assert_eq!(left, "0", "functions with a placeholder left");
        let codes = postgres
            .psql(&[&format!(
                "SELECT (r).code FROM (SELECT {schema}.revoke('nobody') AS r \
                 UNION ALL SELECT {schema}.release('nobody', 'stranger')) AS calls"
            )])
            .await;
        assert_eq!(
            codes,
            format!("{}\n{}", value("REVOKE_NOTHING"), value("LEASE_NOT_HELD"))
        );
    }
}
