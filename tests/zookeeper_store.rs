//! What the ZooKeeper store stands on, against real ZooKeeper servers: a
//! session under the URL's chroot, opened when first needed and again when
//! the server comes back; the store's clock, read by a write and stamped by
//! the leader; fences from zxids that rise across a restart, a leader
//! change and a wipe; the lease operations one by one; the URL's digest
//! user owning every node; TLS (`zookeepers://`) with and without client
//! certificates; and a broker on ZooKeeper as a client sees it.

use leasehold_testkit as common;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{ZooKeeperEnsemble, ZooKeeperServer};
use leasehold_server::{store::zookeeper::ZooKeeper, Error};

/// The store's session timeout (servers clamp it to 2 to 20 ticks: the
/// harness ticks every 200 ms).
const SESSION: Duration = Duration::from_secs(3);

/// The store timeout: generous for a loaded machine.
const TIMEOUT: Duration = Duration::from_secs(5);

fn unix_ms() -> u64 {
    u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

/// The clock is the leader's, read by writing: each tick a later write
/// (a higher zxid), stamped with a time that does not go back and is the
/// machine's (one clock here); each store sees only its own chroot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_reads_the_leaders_clock_under_its_chroot() {
    let server = ZooKeeperServer::start();
    let store = ZooKeeper::open(&format!("{}/a/b", server.url()), SESSION, TIMEOUT).unwrap();
    assert_eq!(store.url().chroot, "/a/b");
    let before = unix_ms();
    let first = store.tick().await.unwrap();
    let second = store.tick().await.unwrap();
    let after = unix_ms();
    assert!(second.zxid > first.zxid, "{first:?} {second:?}");
    assert!(second.unix_ms >= first.unix_ms, "{first:?} {second:?}");
    assert!(
        (before.saturating_sub(1_000)..=after + 1_000).contains(&first.unix_ms),
        "the leader's clock is this machine's: {first:?} in {before}..{after}"
    );
    // The store's nodes are under its chroot: another chroot starts empty.
    let client = store.client().await.unwrap();
    let mut nodes = client.list_children("/").await.unwrap();
    // The probe of TTL nodes goes a second after each session opens.
    nodes.retain(|node| node != "ttl-probe");
    nodes.sort();
    assert_eq!(nodes, ["clock", "fences", "n"]);
    let other = ZooKeeper::open(&format!("{}/other", server.url()), SESSION, TIMEOUT).unwrap();
    let other_client = other.client().await.unwrap();
    assert!(other_client
        .list_children("/fences")
        .await
        .unwrap()
        .is_empty());
}

/// A server that is down fails a call UNAVAILABLE within the store
/// timeout (the broker starts, and says NOT_SERVING, while ZooKeeper is
/// down); once it is back, the next call opens a session again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_down_fails_calls_in_time_and_is_used_again_once_back() {
    let mut server = ZooKeeperServer::start();
    let store = ZooKeeper::open(&server.url(), SESSION, TIMEOUT).unwrap();
    store.tick().await.unwrap();
    server.kill();
    let started = Instant::now();
    match store.tick().await {
        Err(Error::Unavailable(message)) => assert!(message.contains("ZooKeeper"), "{message}"),
        other => panic!("{other:?}"),
    }
    assert!(
        started.elapsed() < TIMEOUT * 2 + Duration::from_secs(1),
        "failed within the store timeout (and one new session's): {:?}",
        started.elapsed()
    );
    server.restart();
    common::eventually(
        Duration::from_secs(30),
        "a tick once the server is back",
        || {
            let store = &store;
            async move { store.tick().await.is_ok() }
        },
    )
    .await;
}

/// Fences rise across a restart (a new epoch: a new base above the last
/// one's span), and across a wipe, which took every base: the new base is
/// above the broker's highest fence seen (the floor) and its clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_rise_across_a_restart_and_a_wipe() {
    let mut server = ZooKeeperServer::start();
    let store = ZooKeeper::open(&server.url(), SESSION, TIMEOUT).unwrap();
    let first = store.tick().await.unwrap();
    let f1 = store.fence(first.zxid, 0).await.unwrap();
    let later = store.tick().await.unwrap();
    let f2 = store.fence(later.zxid, f1).await.unwrap();
    assert_eq!(f2 - f1, u64::try_from(later.zxid - first.zxid).unwrap());

    server.kill();
    server.restart();
    let restarted = eventually_tick(&store).await;
    assert!(restarted.zxid > later.zxid, "{later:?} {restarted:?}");
    // A fresh store (its floor 0, nothing cached) on the restarted data.
    let fresh = ZooKeeper::open(&server.url(), SESSION, TIMEOUT).unwrap();
    let f3 = fresh.fence(restarted.zxid, 0).await.unwrap();
    assert!(f3 > f2, "{f3} > {f2}");

    server.wipe();
    let wiped = eventually_tick(&store).await;
    assert!(wiped.zxid < restarted.zxid, "the zxids started over");
    let f4 = store.fence(wiped.zxid, f3).await.unwrap();
    assert!(f4 > f3, "above the floor: {f4} > {f3}");
    // A broker that saw none of them (floor 0): above them by its clock.
    let f5 = ZooKeeper::open(&server.url(), SESSION, TIMEOUT)
        .unwrap()
        .fence(wiped.zxid, 0)
        .await
        .unwrap();
    assert_eq!(f5, f4, "the epoch's base is written once, read by all");
}

/// A leader change starts a new epoch: the fences of its writes are above
/// every fence of the epoch before, whichever broker meets it first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_rise_across_a_leader_change() {
    let mut ensemble = ZooKeeperEnsemble::start(3);
    let store = ZooKeeper::open(&ensemble.url(), SESSION, TIMEOUT).unwrap();
    let before = store.tick().await.unwrap();
    let f1 = store.fence(before.zxid, 0).await.unwrap();
    let leader = ensemble.leader();
    ensemble.kill(leader);
    ensemble.leader();
    let after = eventually_tick(&store).await;
    assert!(after.epoch() > before.epoch(), "{before:?} {after:?}");
    let other = ZooKeeper::open(&ensemble.url(), SESSION, TIMEOUT).unwrap();
    let f2 = other.fence(after.zxid, 0).await.unwrap();
    assert!(
        f2 >= f1 + (1 << 32) - u64::try_from(before.zxid & 0xffff_ffff).unwrap(),
        "a new epoch's base is at least a span above the last: {f1} {f2}"
    );
    assert_eq!(store.fence(after.zxid, 0).await.unwrap(), f2);
}

/// Ticks until the store answers (a restarted server, a new leader).
async fn eventually_tick(store: &ZooKeeper) -> leasehold_server::store::zookeeper::Stamp {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match store.tick().await {
            Ok(stamp) => return stamp,
            // Polled: a server's election offers no event to await.
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("no tick within 30 s: {e}"),
        }
    }
}

fn spec(name: &str, token: &str, ttl_ms: u64) -> leasehold_server::store::GrantSpec {
    leasehold_server::store::GrantSpec {
        name: name.into(),
        token: token.into(),
        holder: format!("holder of {token}"),
        ttl_ms,
        lock_delay_ms: 0,
        limit: 1,
        queued: false,
    }
}

/// The first slice of the lease operations, a lock's: granted when free,
/// refused while held (with its holder and time left), granted again to
/// its own token (a retry) with the same fence; looked at and released by
/// its token only; a repeated release finds its own end; the next grant's
/// fence is higher.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_is_granted_refused_looked_at_and_released_by_its_token() {
    use leasehold_server::store::{Acquired, BlockedBy, Checked};
    let server = ZooKeeperServer::start();
    let store = ZooKeeper::open(&server.url(), SESSION, TIMEOUT).unwrap();
    let Acquired::Granted { fence, expired: 0 } = store
        .acquire(&spec("jobs/x", "a", 30_000), 0)
        .await
        .unwrap()
    else {
        panic!("not granted")
    };
    match store
        .acquire(&spec("jobs/x", "b", 30_000), fence)
        .await
        .unwrap()
    {
        Acquired::Blocked(blocked) => {
            assert_eq!(blocked.by, BlockedBy::Holder);
            assert_eq!(blocked.fence, fence);
            assert_eq!(blocked.holder, "holder of a");
            assert!(
                (25_000..=30_000).contains(&blocked.remaining_ms),
                "{blocked:?}"
            );
        }
        other @ Acquired::Granted { .. } => panic!("{other:?}"),
    }
    assert_eq!(
        store
            .acquire(&spec("jobs/x", "a", 30_000), fence)
            .await
            .unwrap(),
        Acquired::Granted { fence, expired: 0 },
        "its own token's retry"
    );
    match store.check("jobs/x", "a").await.unwrap() {
        Checked::Done(renewed) => assert_eq!((renewed.ttl_ms, renewed.fence), (30_000, fence)),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        store.check("jobs/x", "b").await.unwrap(),
        Checked::NotOwner { fence }
    );
    assert_eq!(
        store.release("jobs/x", "b").await.unwrap(),
        Checked::NotOwner { fence }
    );
    assert_eq!(
        store.release("jobs/x", "a").await.unwrap(),
        Checked::Done(())
    );
    assert_eq!(
        store.release("jobs/x", "a").await.unwrap(),
        Checked::Released
    );
    assert_eq!(store.check("jobs/x", "a").await.unwrap(), Checked::Released);
    match store
        .acquire(&spec("jobs/x", "b", 30_000), fence)
        .await
        .unwrap()
    {
        Acquired::Granted {
            fence: next,
            expired: 0,
        } => assert!(next > fence, "{next} > {fence}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        store.check("never/held", "a").await.unwrap(),
        Checked::NotHeld
    );
}

/// An expired lease is judged by the leader's stamps: the next grant takes
/// it over and reports it (once), its holder then hears its loss was
/// reported; a lease with a lock-delay holds the name off for the delay
/// after its expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_lock_is_taken_over_and_reported_once() {
    use leasehold_server::store::{Acquired, BlockedBy, Checked};
    let server = ZooKeeperServer::start();
    let store = ZooKeeper::open(&server.url(), SESSION, TIMEOUT).unwrap();
    let Acquired::Granted { fence, .. } = store.acquire(&spec("short", "a", 300), 0).await.unwrap()
    else {
        panic!("not granted")
    };
    // The TTL running out is the event: nothing else to wait on.
    tokio::time::sleep(Duration::from_millis(600)).await;
    match store
        .acquire(&spec("short", "b", 30_000), fence)
        .await
        .unwrap()
    {
        Acquired::Granted {
            fence: next,
            expired: 1,
        } => assert!(next > fence),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        store.check("short", "a").await.unwrap(),
        Checked::ExpiredReported
    );

    let mut delayed = spec("delayed", "a", 300);
    delayed.lock_delay_ms = 30_000;
    let Acquired::Granted { fence, .. } = store.acquire(&delayed, 0).await.unwrap() else {
        panic!("not granted")
    };
    tokio::time::sleep(Duration::from_millis(600)).await;
    match store
        .acquire(&spec("delayed", "b", 30_000), fence)
        .await
        .unwrap()
    {
        Acquired::Blocked(blocked) => {
            assert_eq!(blocked.by, BlockedBy::LockDelay, "{blocked:?}");
            assert!(
                (25_000..30_000).contains(&blocked.remaining_ms),
                "{blocked:?}"
            );
        }
        other @ Acquired::Granted { .. } => panic!("{other:?}"),
    }
    // Its own holder, looking now, hears it expired: the loss, once; and
    // the name stays in its lock-delay, counted from the expiry.
    assert_eq!(store.check("delayed", "a").await.unwrap(), Checked::Expired);
    match store
        .acquire(&spec("delayed", "b", 30_000), fence)
        .await
        .unwrap()
    {
        Acquired::Blocked(blocked) => {
            assert_eq!(blocked.by, BlockedBy::LockDelay, "{blocked:?}");
            assert!(
                (25_000..30_000).contains(&blocked.remaining_ms),
                "{blocked:?}"
            );
        }
        other @ Acquired::Granted { .. } => panic!("{other:?}"),
    }
    assert_eq!(
        store.check("delayed", "a").await.unwrap(),
        Checked::ExpiredReported
    );
}

/// A renewal extends the lease (to a new TTL if asked), for its token
/// only; one that comes after the lease ended (nobody took it over) is
/// turned into the report of its expiry: the holder hears it expired,
/// once. A revoke ends anyone's lease, and its holder hears so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_is_renewed_by_its_token_and_revoked_by_anyone() {
    use leasehold_server::store::{Acquired, Checked, Revocation};
    let server = ZooKeeperServer::start();
    let store = ZooKeeper::open(&server.url(), SESSION, TIMEOUT).unwrap();
    let Acquired::Granted { fence, .. } = store
        .acquire(&spec("renewed", "a", 2_000), 0)
        .await
        .unwrap()
    else {
        panic!("not granted")
    };
    match store.renew("renewed", "a", Some(60_000)).await.unwrap() {
        Checked::Done(renewed) => assert_eq!((renewed.ttl_ms, renewed.fence), (60_000, fence)),
        other => panic!("{other:?}"),
    }
    match store
        .acquire(&spec("renewed", "b", 1_000), fence)
        .await
        .unwrap()
    {
        Acquired::Blocked(blocked) => assert!(blocked.remaining_ms > 50_000, "{blocked:?}"),
        other @ Acquired::Granted { .. } => panic!("{other:?}"),
    }
    match store.renew("renewed", "a", None).await.unwrap() {
        Checked::Done(renewed) => assert_eq!(renewed.ttl_ms, 60_000, "its own TTL kept"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        store.renew("renewed", "b", None).await.unwrap(),
        Checked::NotOwner { fence }
    );

    assert_eq!(
        store.revoke("renewed").await.unwrap(),
        Revocation::Revoked { fence }
    );
    assert_eq!(
        store.renew("renewed", "a", None).await.unwrap(),
        Checked::Revoked { fence }
    );
    assert_eq!(
        store.revoke("renewed").await.unwrap(),
        Revocation::Already { fence },
        "a retried revoke reports the first one's work"
    );
    // A revoke's lock-delay holds the name off from the revoke on.
    let mut delayed = spec("revoked-delayed", "a", 60_000);
    delayed.lock_delay_ms = 30_000;
    let Acquired::Granted { fence, .. } = store.acquire(&delayed, 0).await.unwrap() else {
        panic!("not granted")
    };
    assert_eq!(
        store.revoke("revoked-delayed").await.unwrap(),
        Revocation::Revoked { fence }
    );
    match store
        .acquire(&spec("revoked-delayed", "b", 1_000), fence)
        .await
        .unwrap()
    {
        Acquired::Blocked(blocked) => {
            assert_eq!(
                (blocked.by, blocked.fence),
                (leasehold_server::store::BlockedBy::LockDelay, fence)
            );
            assert!(
                (25_000..=30_000).contains(&blocked.remaining_ms),
                "{blocked:?}"
            );
        }
        other @ Acquired::Granted { .. } => panic!("{other:?}"),
    }

    // Renewed after its end: reported, once.
    let Acquired::Granted { .. } = store.acquire(&spec("late", "a", 300), 0).await.unwrap() else {
        panic!("not granted")
    };
    // The TTL running out is the event: nothing else to wait on.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        store.renew("late", "a", None).await.unwrap(),
        Checked::Expired
    );
    assert_eq!(
        store.renew("late", "a", None).await.unwrap(),
        Checked::ExpiredReported
    );
    let Acquired::Granted { expired: 0, .. } =
        store.acquire(&spec("late", "b", 1_000), 0).await.unwrap()
    else {
        panic!("free, its expiry reported already")
    };
}

/// Describe reads without writing: the live lease (holder, fence, time
/// left within its TTL, its grant time by the leader's clock), a revoked
/// name's lock-delay left, and nothing of a name never held. A batch
/// renewal answers each lease in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_is_described_and_renewed_in_batches() {
    use leasehold_server::store::{Acquired, Checked, RenewItem};
    let server = ZooKeeperServer::start();
    let store = ZooKeeper::open(&server.url(), SESSION, TIMEOUT).unwrap();
    let before = unix_ms();
    let mut delayed = spec("described", "a", 20_000);
    delayed.lock_delay_ms = 15_000;
    let Acquired::Granted { fence, .. } = store.acquire(&delayed, 0).await.unwrap() else {
        panic!("not granted")
    };
    let (described, last) = store.describe("described").await.unwrap();
    let lease = described.lease.expect("held");
    assert_eq!(
        (
            lease.holder.as_str(),
            lease.fence,
            lease.ttl_ms,
            lease.lock_delay_ms,
            last
        ),
        ("holder of a", fence, 20_000, 15_000, fence)
    );
    assert!((15_000..=20_000).contains(&lease.remaining_ms), "{lease:?}");
    assert!(
        (before.saturating_sub(1_000)..=unix_ms() + 1_000).contains(&lease.granted_at_unix_ms),
        "{lease:?}"
    );
    assert_eq!((described.waiters, described.permits), (0, 0));

    let Acquired::Granted { fence: other, .. } =
        store.acquire(&spec("batch", "b", 20_000), 0).await.unwrap()
    else {
        panic!("not granted")
    };
    let item = |name: &str, token: &str, ttl_ms| RenewItem {
        name: name.into(),
        token: token.into(),
        ttl_ms,
    };
    let outcomes = store
        .renew_many(&[
            item("described", "a", None),
            item("batch", "stranger", None),
            item("batch", "b", Some(40_000)),
            item("never", "a", None),
        ])
        .await
        .unwrap();
    assert_eq!(outcomes.len(), 4);
    assert!(matches!(&outcomes[0], Checked::Done(r) if r.fence == fence && r.ttl_ms == 20_000));
    assert_eq!(outcomes[1], Checked::NotOwner { fence: other });
    assert!(matches!(&outcomes[2], Checked::Done(r) if r.fence == other && r.ttl_ms == 40_000));
    assert_eq!(outcomes[3], Checked::NotHeld);

    store.revoke("described").await.unwrap();
    let (described, last) = store.describe("described").await.unwrap();
    assert_eq!(described.lease, None);
    assert!(
        (10_000..=15_000).contains(&described.lock_delay_remaining_ms),
        "{described:?}"
    );
    assert_eq!(last, fence);
    let (never, last) = store.describe("never/held").await.unwrap();
    assert!(never.is_idle() && last == 0, "{never:?}");
}

/// The wait line: callers that wait take places in arrival order (one
/// that tries once takes none, and never jumps the line); when the name
/// is free the first in line is granted, and its place goes with the
/// grant; places are told their ranks and taken out on request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_served_in_arrival_order() {
    use leasehold_server::store::{Acquired, BlockedBy, Checked};
    let server = ZooKeeperServer::start();
    let store = ZooKeeper::open(&server.url(), SESSION, TIMEOUT).unwrap();
    let waiting = |token: &str| {
        let mut spec = spec("line", token, 30_000);
        spec.queued = true;
        spec
    };
    let Acquired::Granted { fence, .. } = store.acquire(&waiting("a"), 0).await.unwrap() else {
        panic!("not granted")
    };
    let blocked = |outcome: Acquired| match outcome {
        Acquired::Blocked(blocked) => blocked,
        other @ Acquired::Granted { .. } => panic!("{other:?}"),
    };
    let b = blocked(store.acquire(&waiting("b"), fence).await.unwrap());
    assert_eq!((b.by, b.position, b.queued), (BlockedBy::Holder, 1, 1));
    let c = blocked(store.acquire(&waiting("c"), fence).await.unwrap());
    assert_eq!((c.position, c.queued), (2, 2));
    // Asking again keeps its place.
    let b = blocked(store.acquire(&waiting("b"), fence).await.unwrap());
    assert_eq!((b.position, b.queued), (1, 2));
    let d = blocked(
        store
            .acquire(&spec("line", "d", 30_000), fence)
            .await
            .unwrap(),
    );
    assert_eq!(
        (d.by, d.position),
        (BlockedBy::Holder, 0),
        "a try takes no place"
    );

    assert_eq!(store.release("line", "a").await.unwrap(), Checked::Done(()));
    let d = blocked(
        store
            .acquire(&spec("line", "d", 30_000), fence)
            .await
            .unwrap(),
    );
    assert_eq!(d.by, BlockedBy::Queue, "free, but b and c came first");
    let c = blocked(store.acquire(&waiting("c"), fence).await.unwrap());
    assert_eq!((c.by, c.position), (BlockedBy::Queue, 2));
    let Acquired::Granted { fence: next, .. } = store.acquire(&waiting("b"), fence).await.unwrap()
    else {
        panic!("b, first in line, is granted")
    };
    assert!(next > fence);
    let tokens = ["b".to_owned(), "c".to_owned(), "z".to_owned()];
    assert_eq!(
        store.refresh_places("line", &tokens).await.unwrap(),
        [None, Some(0), None],
        "b's place went with its grant"
    );
    store.dequeue("line", "c").await.unwrap();
    assert_eq!(
        store.refresh_places("line", &tokens).await.unwrap(),
        [None, None, None]
    );
    store.release("line", "b").await.unwrap();
    let Acquired::Granted { .. } = store
        .acquire(&spec("line", "d", 30_000), fence)
        .await
        .unwrap()
    else {
        panic!("nobody waits: a try is granted")
    };
}

/// A lease nobody asks about again is swept once it ended more than its
/// lock-delay and the records' linger (10 s) ago, with its name's node
/// (the reaper then takes the empty bucket): nothing stays per distinct
/// name. A lease still alive, and one ended within its linger, are not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_ended_long_ago_is_swept_and_a_live_one_is_not() {
    use leasehold_server::store::{
        zookeeper::layout::{bucket, NamePaths},
        Acquired, Checked,
    };
    let server = ZooKeeperServer::start();
    let store = ZooKeeper::open(&server.url(), SESSION, TIMEOUT).unwrap();
    let client = store.client().await.unwrap();
    for (name, token, ttl_ms) in [("gone/a", "a", 300), ("kept/b", "b", 120_000)] {
        let granted = store.acquire(&spec(name, token, ttl_ms), 0).await.unwrap();
        assert!(matches!(granted, Acquired::Granted { .. }), "{granted:?}");
    }
    let gone = NamePaths::new("gone/a", zookeeper_client::Acls::anyone_all());
    // Ended, but within its linger: kept (its holder must still hear
    // "expired").
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(store.sweep_bucket(bucket("gone/a")).await.unwrap(), 0);
    assert!(client.check_stat(&gone.lock()).await.unwrap().is_some());
    // Past its TTL and the linger: swept.
    tokio::time::sleep(Duration::from_millis(300 + 10_000)).await;
    assert_eq!(store.sweep_bucket(bucket("gone/a")).await.unwrap(), 1);
    assert!(client.check_stat(&gone.lock()).await.unwrap().is_none());
    assert_eq!(store.sweep_bucket(bucket("gone/a")).await.unwrap(), 0);
    assert_eq!(store.check("gone/a", "a").await.unwrap(), Checked::NotHeld);
    // The live one: never.
    assert_eq!(store.sweep_bucket(bucket("kept/b")).await.unwrap(), 0);
    assert!(matches!(
        store.check("kept/b", "b").await.unwrap(),
        Checked::Done(_)
    ));
}

/// A fence base is read once per epoch and session, however many fences
/// concurrent calls compute: their answers are taken in any order, and a
/// held lease's fence is its grant's (older) zxid, neither of which is a
/// wipe. (The store once took any zxid below the highest seen for a wipe:
/// under 16 workers it forgot its bases and read them again on most calls,
/// logging a warning each time.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_read_the_fence_base_once() {
    use leasehold_server::store::Acquired;
    let server = ZooKeeperServer::start();
    let store = ZooKeeper::open(&server.url(), SESSION, TIMEOUT).unwrap();
    let names: Vec<String> = (0..32).map(|i| format!("many/{i}")).collect();
    let specs: Vec<_> = names.iter().map(|name| spec(name, name, 60_000)).collect();
    let grants =
        futures_util::future::join_all(specs.iter().map(|spec| store.acquire(spec, 0))).await;
    let mut fences = Vec::new();
    for granted in grants {
        match granted.unwrap() {
            Acquired::Granted { fence, .. } => fences.push(fence),
            blocked @ Acquired::Blocked(_) => panic!("{blocked:?}"),
        }
    }
    // Older zxids (the grants') read after newer ones (the renewals').
    for _ in 0..3 {
        let renewed =
            futures_util::future::join_all(names.iter().map(|name| store.renew(name, name, None)))
                .await;
        for (outcome, fence) in renewed.into_iter().zip(&fences) {
            match outcome.unwrap() {
                leasehold_server::store::Checked::Done(r) => assert_eq!(r.fence, *fence),
                other => panic!("{other:?}"),
            }
        }
    }
    assert_eq!(store.base_reads(), 1, "one epoch, one session: one read");
}

/// A grant of `name` to `token` through `store`: its fence. UNAVAILABLE
/// is taken for "not yet" for up to 30 s (a retry with the same token finds
/// its own lease): on a loaded machine a call may take longer than a store
/// timeout of 1 s, which bounds the whole operation.
async fn granted(store: &leasehold_server::store::Store, name: &str, token: &str) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match store.acquire(&spec(name, token, 30_000)).await {
            Ok(leasehold_server::store::Acquired::Granted { fence, .. }) => return fence,
            Err(Error::Unavailable(e)) if Instant::now() < deadline => eprintln!("not yet: {e}"),
            other => panic!("{name} not granted to {token}: {other:?}"),
        }
    }
}

/// `store`, once a ping is answered (UNAVAILABLE taken for "not yet", for
/// up to 30 s): a JVM just started on a loaded machine may take longer
/// than the client's connection timeout (1.2 s for a 3 s session) to
/// answer its first session, a TLS handshake most of all.
async fn answering(store: leasehold_server::store::Store) -> leasehold_server::store::Store {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match store.ping().await {
            Ok(_) => return store,
            Err(Error::Unavailable(e)) if Instant::now() < deadline => {
                eprintln!("not yet: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("the store does not answer: {e:?}"),
        }
    }
}

/// What `store`'s first call is refused with: UNAVAILABLE, its message.
async fn refused(store: &leasehold_server::store::Store) -> String {
    match store.acquire(&spec("jobs/x", "intruder", 30_000)).await {
        Err(Error::Unavailable(message)) => message,
        other => panic!("not refused UNAVAILABLE: {other:?}"),
    }
}

/// With credentials in the URL (`user:password@`, ZooKeeper's digest
/// scheme), every node the store creates is that user's alone
/// (`creator_all`): another broker logged in as the same user serves the
/// same leases; a client without them can neither read the store's nodes
/// (a lease node holds its owner token) nor write under them; a broker
/// with a wrong password, or none, is refused with a message naming the
/// credentials, and the lease is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_credentials_the_stores_nodes_are_its_users_alone() {
    use leasehold_server::store::{Acquired, Checked, Store, StoreOptions};
    use zookeeper_client as zk;
    let server = ZooKeeperServer::start();
    let at = |userinfo: &str| format!("zookeeper://{userinfo}{}/app", server.connect_string());
    let options = StoreOptions::new("t:", TIMEOUT);
    let store = answering(Store::open(&at("broker:s3cret@"), &options).unwrap()).await;
    let fence = granted(&store, "jobs/x", "holder").await;

    let replica = Store::open(&at("broker:s3cret@"), &options).unwrap();
    match replica
        .acquire(&spec("jobs/x", "other", 30_000))
        .await
        .unwrap()
    {
        Acquired::Blocked(blocked) => assert_eq!(blocked.fence, fence),
        granted @ Acquired::Granted { .. } => panic!("granted twice: {granted:?}"),
    }
    match replica.renew("jobs/x", "holder", None).await.unwrap() {
        Checked::Done(renewed) => assert_eq!(renewed.fence, fence),
        other => panic!("the holder's renewal through a replica: {other:?}"),
    }

    let stranger = zk::Client::connector()
        .with_session_timeout(SESSION)
        .connect(&server.connect_string())
        .await
        .unwrap();
    assert_eq!(
        stranger.get_data("/app").await.unwrap_err(),
        zk::Error::NoAuth
    );
    assert_eq!(
        stranger.list_children("/app").await.unwrap_err(),
        zk::Error::NoAuth
    );
    assert_eq!(
        stranger.set_data("/app", b"x", None).await.unwrap_err(),
        zk::Error::NoAuth
    );
    let create = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    assert_eq!(
        stranger.create("/app/x", b"", &create).await.unwrap_err(),
        zk::Error::NoAuth
    );

    for userinfo in ["broker:wrong@", "intruder:s3cret@", ""] {
        let message = refused(&Store::open(&at(userinfo), &options).unwrap()).await;
        assert!(
            message.contains("refused the store's credentials"),
            "{userinfo}: {message}"
        );
        assert!(!message.contains("s3cret"), "{message}");
    }
    match store.renew("jobs/x", "holder", None).await.unwrap() {
        Checked::Done(renewed) => assert_eq!(renewed.fence, fence),
        other => panic!("the lease after the intruders: {other:?}"),
    }
}

/// `zookeepers://` reaches a server's TLS port (ZooKeeper's Netty
/// `secureClientPort`, which here requires a client certificate) with the
/// CA of `--store-ca` and the certificate of `--store-client-cert`: every
/// operation works. Without the client certificate, with a CA that did not
/// sign the server's, with the system's CAs only, or over TLS to the plain
/// port, the store is refused UNAVAILABLE, in time and saying what to
/// check; the TLS files with a `zookeeper://` URL are refused at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeepers_takes_the_tls_port_with_the_right_certificates_only() {
    use leasehold_server::store::{Checked, Store, StoreOptions};
    let ca = common::certs::Ca::new("ZooKeeper test CA");
    let server = ZooKeeperServer::start_tls(&ca.issue(&["127.0.0.1"]), &ca.pem, true);
    let client = ca.issue_client("broker", &[]);
    let url = format!("zookeepers://127.0.0.1:{}/app", server.tls_port());
    let options = |ca: Option<&str>, client: Option<&(String, String)>| {
        let mut options = StoreOptions::new("t:", TIMEOUT);
        options.tls_ca = ca.map(|pem| pem.as_bytes().to_vec());
        options.tls_client =
            client.map(|(cert, key)| (cert.clone().into_bytes(), key.clone().into_bytes()));
        options
    };

    let store = answering(Store::open(&url, &options(Some(&ca.pem), Some(&client))).unwrap()).await;
    let fence = granted(&store, "jobs/x", "holder").await;
    match store.renew("jobs/x", "holder", None).await.unwrap() {
        Checked::Done(renewed) => assert_eq!(renewed.fence, fence),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        store.release("jobs/x", "holder").await.unwrap(),
        Checked::Done(())
    );
    assert!(granted(&store, "jobs/x", "next").await > fence);

    let stranger_ca = common::certs::Ca::new("another CA");
    let plain = format!("zookeepers://127.0.0.1:{}/app", server.port());
    for (what, url, options) in [
        ("no client certificate", &url, options(Some(&ca.pem), None)),
        (
            "another CA",
            &url,
            options(Some(&stranger_ca.pem), Some(&client)),
        ),
        ("the system's CAs", &url, options(None, Some(&client))),
        (
            "the plain port",
            &plain,
            options(Some(&ca.pem), Some(&client)),
        ),
    ] {
        let started = Instant::now();
        let message = match Store::open(url, &options) {
            Ok(store) => refused(&store).await,
            // No CA in the system's store at all.
            Err(Error::InvalidArgument(message)) if what == "the system's CAs" => message,
            Err(e) => panic!("{what}: {e:?}"),
        };
        assert!(
            started.elapsed() < TIMEOUT + Duration::from_secs(5),
            "{what}: refused after {:?}",
            started.elapsed()
        );
        assert!(
            message.contains("TLS") || message.contains("--store-ca"),
            "{what}: {message}"
        );
    }

    let plain_url = format!("zookeeper://127.0.0.1:{}/app", server.port());
    match Store::open(&plain_url, &options(Some(&ca.pem), None)) {
        Err(Error::InvalidArgument(message)) => {
            assert!(message.contains("zookeepers://"), "{message}");
        }
        other => panic!("TLS files with zookeeper:// taken: {:?}", other.map(|_| ())),
    }
}

/// A store call is bounded by the store timeout as a whole, not per
/// request: behind a path that adds 300 ms each way, every operation
/// (several requests: a sync, reads, a multi) answers or fails UNAVAILABLE
/// within the timeout and a margin, never after several timeouts. (Bounded
/// per request only, an acquire took 4.2 s for a 1 s timeout.) Once the
/// path is fast again the same store serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_path_bounds_each_call_by_the_store_timeout_as_a_whole() {
    use leasehold_server::store::{Acquired, Store, StoreOptions};
    let server = ZooKeeperServer::start();
    let proxy = common::proxy::Proxy::start(
        format!("127.0.0.1:{}", server.port())
            .parse()
            .expect("an address"),
    )
    .await;
    let timeout = Duration::from_secs(1);
    let store = answering(
        Store::open(
            &format!("zookeeper://{}/app", proxy.addr()),
            &StoreOptions::new("t:", timeout),
        )
        .unwrap(),
    )
    .await;
    let fence = granted(&store, "held", "holder").await;

    proxy.set_latency(Duration::from_millis(300));
    for round in 0..3 {
        let started = Instant::now();
        let outcome = store
            .acquire(&spec(&format!("slow/{round}"), "t", 30_000))
            .await;
        let took = started.elapsed();
        eprintln!("round {round}: {took:?}: {outcome:?}");
        assert!(
            took < timeout + Duration::from_millis(700),
            "an acquire took {took:?} for a store timeout of {timeout:?}: {outcome:?}"
        );
        assert!(
            matches!(
                outcome,
                Ok(Acquired::Granted { .. }) | Err(Error::Unavailable(_))
            ),
            "{outcome:?}"
        );
        let started = Instant::now();
        let outcome = store.renew("held", "holder", None).await;
        let took = started.elapsed();
        assert!(
            took < timeout + Duration::from_millis(700),
            "a renewal took {took:?} for a store timeout of {timeout:?}: {outcome:?}"
        );
    }

    proxy.set_latency(Duration::ZERO);
    let store = answering(store).await;
    match store.renew("held", "holder", None).await.unwrap() {
        leasehold_server::store::Checked::Done(renewed) => assert_eq!(renewed.fence, fence),
        other => panic!("the lease once the path is fast again: {other:?}"),
    }
}

/// The broker on ZooKeeper, as a client sees it: `leasehold serve --store
/// zookeeper://127.0.0.1:PORT` (the default chroot) takes a lease with the
/// TTL asked (ZooKeeper keeps milliseconds), keeps it over several TTLs on
/// the client's KeepAlive stream while a second caller is refused, checks
/// its fence, and releases it to the next caller, whose fence is higher.
#[tokio::test]
async fn a_broker_on_zookeeper_serves_a_client() {
    use leasehold_client::{AcquireOptions, Client, ClientError};
    let server = ZooKeeperServer::start();
    let broker = common::Broker::start(&format!("zookeeper://127.0.0.1:{}", server.port())).await;
    let client = Client::connect(broker.url()).await.unwrap();
    let options = || AcquireOptions::new().ttl(Duration::from_millis(1_500));
    let lease = client.acquire("jobs/nightly", options()).await.unwrap();
    assert_eq!(lease.ttl(), Duration::from_millis(1_500));
    let renewed_until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < renewed_until {
        match client.acquire("jobs/nightly", options()).await {
            Err(ClientError::NotAcquired(_)) => {}
            other => panic!("a held lock taken: {other:?}"),
        }
        assert!(lease.check().is_ok(), "the lease was lost while kept alive");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(
        client
            .check_fence("jobs/nightly", lease.fence())
            .await
            .unwrap(),
        (true, lease.fence())
    );
    let fence = lease.fence();
    lease.release().await.unwrap();
    let next = client.acquire("jobs/nightly", options()).await.unwrap();
    assert!(next.fence() > fence, "{} after {fence}", next.fence());
    let (current, _) = client.check_fence("jobs/nightly", fence).await.unwrap();
    assert!(!current, "the old fence is still current");
    next.release().await.unwrap();
}
