//! The ZooKeeper store beyond the contract (tests/conformance.rs runs that
//! on ZooKeeper too): how it fails, against real ZooKeeper servers on
//! loopback, through `leasehold_server::store::Store`, as tests/etcd.rs
//! does for etcd. What each test covers:
//!
//! - `a_restart_with_its_data_keeps_the_lease_and_fences_rise`: a server
//!   killed and started again with its data, a new epoch (zxids jump by
//!   2^32): the lease granted before is still its holder's (renewed with
//!   its fence, refused to another), and the next grant's fence, by this
//!   store and by one that saw no fence before, is above every earlier one.
//! - `a_wipe_loses_the_lease_and_fences_still_rise`: a server whose data is
//!   deleted (zxids start over, the fence bases are gone, the store's
//!   session is refused): the old holder hears the lease lost, never Done,
//!   and fences still rise above every fence granted before.
//! - `a_release_right_after_a_wipe_is_done`: the first lease on the fresh
//!   data (its chroot, buckets and name nodes made again) is released Done
//!   and free for the next.
//! - `zookeeper_killed_fails_calls_in_time_and_is_used_again_once_back`: a
//!   server killed (its port refuses): every store call and a watch of a new
//!   name fail UNAVAILABLE within 3 s for a store timeout of 1 s, and once
//!   it is back the same store works by itself (the lease held before kept,
//!   a release waking a watch).
//! - `zookeeper_frozen_fails_calls_in_time_and_is_used_again_once_back`: a
//!   server frozen (SIGSTOP: connections open, nothing answered), longer
//!   than the session timeout: the same, a watch sent on the session open
//!   when it froze included.
//! - `the_leader_killed_under_a_held_lease_keeps_it_and_fences_rise`: a
//!   three-member ensemble's leader killed while a lease is held and a
//!   client calls all along: answered right or UNAVAILABLE, never wrong;
//!   the lease kept with its fence, refused to another, fences rising; the
//!   old leader back, the lease still held.
//! - `with_a_follower_{killed,frozen}_every_call_is_served_by_the_others`:
//!   an ensemble with a follower away (preferably the one the store's
//!   session is on) serves 20 acquire-renew-release cycles in a row.
//! - `the_brokers_session_expired_wakes_its_waiters_and_keeps_every_lease`:
//!   the broker cut off from ZooKeeper (a stalled proxy) longer than its
//!   session timeout, so the session expires: every lease is still held
//!   (leases are not ephemeral), the waiters' watches are woken, their
//!   places in line are gone (they must take new ones, which work, as do
//!   the watches of the new session).
//! - `the_leader_partitioned_away_under_a_held_lease_keeps_it_and_fences_rise`:
//!   a three-member ensemble whose leader runs in a network namespace that
//!   is cut off (packets dropped, nothing refused): the other two elect a
//!   leader and the store serves from them (calls answered right or
//!   UNAVAILABLE), the lease kept with its fence, fences rising; after the
//!   heal the old leader follows and serves the lease as held.
//! - `the_clock_stepped_back_an_hour_ends_an_abandoned_lease_in_its_ttl`:
//!   the server's wall clock (libfaketime), by which leases are judged,
//!   stepped an hour back: a lease its holder abandoned is granted to the
//!   next within seconds (its TTL from the step, at most), not an hour
//!   later, with a higher fence; a lease renewed all along through the step
//!   is never lost.
//! - `the_clock_stepped_forward_ends_leases_early_and_fences_still_rise`:
//!   the clock stepped forward past a lease's TTL ends it at once (the one
//!   fault a lease judged by a clock cannot hide): the next holder is
//!   granted with a higher fence, and the overtaken holder is never
//!   answered Done again.
//!
//! The partition test needs root (network namespaces); without it, it
//! prints `skipped: ...` and returns.

use leasehold_testkit as common;

use std::{
    future::Future,
    net::{Ipv4Addr, SocketAddr},
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use common::{
    outage::{
        a_watch_refused_in_time, cycle, every_call_refused_in_time, go_on_calling, granted_above,
        namespace, refused_to_another, renewed_with, spec, still_held, twenty_cycles_in_a_row,
        until_answered, Away, Outage, FAIL_WITHIN, TIMEOUT,
    },
    proxy::Proxy,
    zookeeper::Mode,
    ZooKeeperEnsemble, ZooKeeperServer,
};
use futures_util::FutureExt;
use leasehold_server::store::{
    Acquired, Checked, Event, GrantSpec, Renewed, Store, StoreOptions, Watch,
};

/// The session timeout the store asks for (`QUEUE_LIFETIME`), which the
/// harness's servers (`tickTime=200`, sessions of 0.4 to 10 s) grant.
const SESSION: Duration = Duration::from_secs(3);

/// ZooKeeper, as the calls checked while it is away name it.
const ZOOKEEPER: Outage = Outage { store: "ZooKeeper" };

fn open(url: &str) -> Store {
    Store::open(url, &StoreOptions::new("test:", TIMEOUT)).expect("open the ZooKeeper store")
}

/// A store of `url` that answers: its first ping answered (a new session
/// opened) within 30 s. A loaded machine may take more than the store
/// timeout to open the first session of a JVM just started (a setup's
/// first grant was refused "did not open a session within 1000 ms"), which
/// is no fault under test.
async fn opened(url: &str) -> Store {
    let store = open(url);
    ok("a first ping", || store.ping()).await;
    store
}

/// `call`'s answer, UNAVAILABLE taken for "not yet" for up to 30 s (a
/// store timeout of 1 s on a loaded machine), any other error failing the
/// test: for the calls around a fault, whose answer is what is checked.
async fn ok<T, F, Fut>(what: &str, call: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = leasehold_server::Result<T>>,
{
    until_answered(Duration::from_secs(30), what, call).await.0
}

/// Grants `spec` (UNAVAILABLE retried: a retried grant finds its own
/// lease, with its fence): the fence.
async fn grant(store: &Store, spec: &GrantSpec) -> u64 {
    match ok("a grant", || store.acquire(spec)).await {
        Acquired::Granted { fence, .. } => fence,
        blocked @ Acquired::Blocked(_) => panic!("{} not granted: {blocked:?}", spec.name),
    }
}

/// Grants `count` fresh names and releases them (zxids, so fences, move
/// on): the highest fence granted.
async fn grant_and_release(store: &Store, prefix: &str, count: usize) -> u64 {
    let mut highest = 0;
    for i in 0..count {
        let name = format!("{prefix}/{i}");
        highest = highest.max(grant(store, &spec(&name, "t", 30_000)).await);
        assert_eq!(
            ok("release", || store.release(&name, "t")).await,
            Checked::Done(())
        );
    }
    highest
}

/// A standalone server killed and started again with its data (a new
/// epoch): the lease granted before is still its holder's (renewed with
/// the same fence, refused to another), and the next grant's fence is
/// above every fence granted before, by this store and by one that saw no
/// fence before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_its_data_keeps_the_lease_and_fences_rise() {
    let mut zk = ZooKeeperServer::start();
    let store = opened(&zk.url()).await;
    let kept = grant(&store, &spec("kept", "holder", 60_000)).await;
    let highest = grant_and_release(&store, "before", 5).await.max(kept);
    let epoch_before = zk.srvr().zxid >> 32;

    tokio::task::block_in_place(|| zk.restart());
    let restarted = Instant::now();
    let (renewed, refused) = until_answered(Duration::from_secs(30), "renew kept", || {
        store.renew("kept", "holder", None)
    })
    .await;
    eprintln!(
        "renewed {:?} after the restart ({refused} calls UNAVAILABLE first)",
        restarted.elapsed()
    );
    assert_eq!(
        renewed,
        renewed_with(kept),
        "the lease survived the restart"
    );
    // A standalone server keeps its epoch over a restart (srvr said 0 then
    // 0 here): the zxids go on from the data. A new epoch comes with an
    // election (the leader's kill below).
    let epoch_after = zk.srvr().zxid >> 32;
    eprintln!("epoch {epoch_before} before the restart, {epoch_after} after");
    assert!(
        epoch_after >= epoch_before,
        "the epoch went back over a restart: {epoch_before} then {epoch_after}"
    );
    // Renewals go on in the new epoch.
    for _ in 0..3 {
        assert_eq!(
            ok("renew", || store.renew("kept", "holder", None)).await,
            renewed_with(kept)
        );
    }
    let thief = spec("kept", "thief", 30_000);
    match ok("acquire", || store.acquire(&thief)).await {
        Acquired::Blocked(blocked) => assert_eq!(blocked.fence, kept),
        granted @ Acquired::Granted { .. } => {
            panic!("kept granted twice after the restart: {granted:?}")
        }
    }
    let fresh = grant(&store, &spec("fresh", "t", 30_000)).await;
    assert!(
        fresh > highest,
        "fence {fresh} after the restart, {highest} before"
    );
    // A store that saw no fence before (a broker started since) too.
    let newcomer = opened(&zk.url()).await;
    let next = grant(&newcomer, &spec("next", "t", 30_000)).await;
    assert!(next > fresh, "fence {next} after {fresh}");
    assert_eq!(
        ok("check", || newcomer.check("kept", "holder")).await,
        renewed_with(kept),
        "the lease as another broker sees it"
    );
}

/// A standalone server wiped (its data deleted, zxids from 0 again): the
/// holder of a lease granted before hears it lost at its next renewal,
/// never Done, and fences still rise: the first grant after the wipe, by a
/// store that saw no fence before (the broker clock's term alone), and the
/// grant of the lost name to another, are above every fence granted
/// before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wipe_loses_the_lease_and_fences_still_rise() {
    let mut zk = ZooKeeperServer::start();
    let store = opened(&zk.url()).await;
    let lost = grant(&store, &spec("lost", "holder", 30_000)).await;
    let highest = grant_and_release(&store, "before", 5).await.max(lost);

    tokio::task::block_in_place(|| zk.wipe());
    let wiped = Instant::now();
    let (renewed, refused) = until_answered(Duration::from_secs(30), "renew lost", || {
        store.renew("lost", "holder", None)
    })
    .await;
    eprintln!(
        "answered {:?} after the wipe ({refused} calls UNAVAILABLE first)",
        wiped.elapsed()
    );
    assert!(
        matches!(
            renewed,
            Checked::NotHeld | Checked::Expired | Checked::ExpiredReported
        ),
        "the holder of a lease ZooKeeper lost was answered {renewed:?}"
    );
    assert_eq!(ok("check", || store.check("lost", "holder")).await, renewed);

    let newcomer = opened(&zk.url()).await;
    let first = grant(&newcomer, &spec("after", "t", 30_000)).await;
    assert!(
        first > highest,
        "fence {first} after the wipe, {highest} before"
    );
    let regranted = grant(&store, &spec("lost", "thief", 30_000)).await;
    assert!(regranted > first, "fence {regranted} after {first}");
    assert_eq!(
        ok("renew", || store.renew("lost", "holder", None)).await,
        Checked::NotOwner { fence: regranted },
        "the old holder, once the name is someone else's"
    );
}

/// A standalone server wiped and back at once: a lease granted right after
/// the wipe (on data whose chroot, buckets and name nodes the store must
/// make again, by a store whose session the new server refused) is
/// released by its holder, Done (after UNAVAILABLE at most), and the name
/// is then free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_right_after_a_wipe_is_done() {
    let mut zk = ZooKeeperServer::start();
    let store = opened(&zk.url()).await;
    grant_and_release(&store, "before", 1).await;
    let released = Instant::now();
    tokio::task::block_in_place(|| zk.wipe());
    let after = spec("after", "holder", 30_000);
    let (granted, _) =
        until_answered(Duration::from_secs(30), "a grant", || store.acquire(&after)).await;
    assert!(matches!(granted, Acquired::Granted { .. }), "{granted:?}");
    let (outcome, refused) = until_answered(Duration::from_secs(10), "the release", || {
        store.release("after", "holder")
    })
    .await;
    eprintln!(
        "released {:?} after the release before the wipe ({refused} UNAVAILABLE first)",
        released.elapsed()
    );
    assert_eq!(outcome, Checked::Done(()));
    // UNAVAILABLE at most (a store timeout of 1 s on a loaded machine: one
    // run of the whole file failed an `unwrap` here, its error not kept).
    let next = spec("after", "next", 30_000);
    let (taken, refused) = until_answered(Duration::from_secs(10), "the next grant", || {
        store.acquire(&next)
    })
    .await;
    if refused > 0 {
        eprintln!("the next grant was UNAVAILABLE {refused} times first");
    }
    match taken {
        Acquired::Granted { .. } => {}
        Acquired::Blocked(blocked) => panic!("released, yet held: {blocked:?}"),
    }
}

/// Once ZooKeeper answers again: a grant succeeds within 30 s (the same
/// store, by itself) with a fence above `held`, the lease `held` still
/// holds its fence, and a release wakes a watch of the name.
async fn back_by_itself(store: &Store, held: u64, since: Instant) {
    let after = spec("after", "t", 30_000);
    let (granted, refused) =
        until_answered(Duration::from_secs(30), "a grant", || store.acquire(&after)).await;
    eprintln!(
        "granted {:?} after ZooKeeper came back ({refused} calls UNAVAILABLE first)",
        since.elapsed()
    );
    match granted {
        Acquired::Granted { fence, .. } => assert!(fence > held, "fence {fence} after {held}"),
        Acquired::Blocked(blocked) => panic!("a free name blocked: {blocked:?}"),
    }
    assert_eq!(
        ok("renew", || store.renew("held", "holder", None)).await,
        renewed_with(held)
    );
    let (watch, _) = until_answered(Duration::from_secs(10), "a watch", || {
        store.watch("held", Event::Released, None)
    })
    .await;
    // A wake-up of the watch's setting again is no news.
    let _ = watch.notified().now_or_never();
    let notified = watch.notified();
    tokio::pin!(notified);
    notified.as_mut().enable();
    assert_eq!(
        ok("release", || store.release("held", "holder")).await,
        Checked::Done(())
    );
    tokio::time::timeout(Duration::from_secs(5), notified)
        .await
        .expect("the release woke the watch");
}

/// Holds `held` (TTL 60 s; its fence returned), `spare` and `watched`,
/// and keeps a watch of `watched` open (so the store's session has a watch
/// set before the fault: [`the_watch_set_before_still_wakes`]).
async fn holding(store: &Store) -> (u64, Watch) {
    let held = grant(store, &spec("held", "holder", 60_000)).await;
    grant(store, &spec("spare", "spare", 60_000)).await;
    grant(store, &spec("watched", "holder", 60_000)).await;
    let kept = ok("a watch", || store.watch("watched", Event::Released, None)).await;
    (held, kept)
}

/// The watch of `watched` set before the fault ([`holding`]) is woken by
/// the release of `watched` after it, within 5 s (the wake-ups of the
/// store's reconnects drained first).
async fn the_watch_set_before_still_wakes(store: &Store, kept: &Watch) {
    while kept.notified().now_or_never().is_some() {}
    let notified = kept.notified();
    tokio::pin!(notified);
    notified.as_mut().enable();
    assert_eq!(
        ok("release", || store.release("watched", "holder")).await,
        Checked::Done(())
    );
    tokio::time::timeout(Duration::from_secs(5), notified)
        .await
        .expect("the release woke the watch set before the fault");
}

/// A watch of `held` set before a fault (its session moved to another
/// member since, or reconnected) is woken by the holder's release after
/// it, within 5 s: the wake-ups of the reconnects themselves drained first.
async fn a_release_wakes_the_watch_set_before(store: &Store, watch: &Watch) {
    while watch.notified().now_or_never().is_some() {}
    let notified = watch.notified();
    tokio::pin!(notified);
    notified.as_mut().enable();
    assert_eq!(
        ok("release", || store.release("held", "holder")).await,
        Checked::Done(())
    );
    tokio::time::timeout(Duration::from_secs(5), notified)
        .await
        .expect("the release woke the watch set before the fault");
}

/// A standalone server killed: every store call, and a watch of a name
/// not watched yet, fails UNAVAILABLE, each within 3 s for a store timeout
/// of 1 s (none hangs), for three rounds (past the session timeout: the
/// client gives the session up and the store tries new ones); once the
/// server is started again with its data, the same store works again by
/// itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_killed_fails_calls_in_time_and_is_used_again_once_back() {
    let mut zk = ZooKeeperServer::start();
    let store = opened(&zk.url()).await;
    let (held, kept) = holding(&store).await;

    zk.kill();
    a_watch_refused_in_time(&store, ZOOKEEPER, "held").await;
    every_call_refused_in_time(&store, ZOOKEEPER, 3).await;
    a_watch_refused_in_time(&store, ZOOKEEPER, "another").await;
    tokio::task::block_in_place(|| zk.restart());
    back_by_itself(&store, held, Instant::now()).await;
    the_watch_set_before_still_wakes(&store, &kept).await;
}

/// A standalone server frozen (SIGSTOP: its connections stay open and it
/// answers nothing): a watch sent on the session open when it froze, then
/// every store call, two rounds over (well past the session timeout), fail
/// UNAVAILABLE within 3 s for a store timeout of 1 s; once it runs again
/// the same store works again by itself, the lease held before intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_frozen_fails_calls_in_time_and_is_used_again_once_back() {
    let zk = ZooKeeperServer::start();
    let store = opened(&zk.url()).await;
    let (held, kept) = holding(&store).await;
    // More watched names, each a watch task of the store's that sets its
    // watch again (a new session) once the client gives the frozen one up,
    // queueing for the session as the calls do.
    let mut others = Vec::new();
    for i in 0..4 {
        let name = format!("w/{i}");
        others.push(ok("a watch", || store.watch(&name, Event::Released, None)).await);
    }

    zk.pause();
    let frozen = Instant::now();
    a_watch_refused_in_time(&store, ZOOKEEPER, "held").await;
    every_call_refused_in_time(&store, ZOOKEEPER, 2).await;
    a_watch_refused_in_time(&store, ZOOKEEPER, "another").await;
    eprintln!("frozen for {:?}", frozen.elapsed());
    zk.resume();
    back_by_itself(&store, held, Instant::now()).await;
    the_watch_set_before_still_wakes(&store, &kept).await;
}

/// A three-member ensemble whose leader is killed (SIGKILL) while a lease
/// is held: once a new leader is elected the lease is still its holder's
/// (renewed with the same fence), another acquirer is refused, and fences
/// go on rising (the new epoch's base above the old one's span); a client
/// calling all along was answered right or UNAVAILABLE, never wrong; and
/// the killed member, started again, rejoins with the lease still held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_killed_under_a_held_lease_keeps_it_and_fences_rise() {
    let mut zk = tokio::task::block_in_place(|| ZooKeeperEnsemble::start(3));
    let store = opened(&zk.url()).await;
    let held = grant(&store, &spec("held", "holder", 60_000)).await;
    let highest = Arc::new(AtomicU64::new(
        grant_and_release(&store, "before", 3).await.max(held),
    ));
    let leader = tokio::task::block_in_place(|| zk.leader());
    let highest_zxid_before = zk.srvr(leader).expect("the leader's srvr").zxid;
    let watch = ok("a watch", || store.watch("held", Event::Released, None)).await;

    let stop = Arc::new(AtomicBool::new(false));
    let calling = tokio::spawn(go_on_calling(
        store.clone(),
        "during",
        held,
        Arc::clone(&highest),
        Arc::clone(&stop),
    ));
    let killed = Instant::now();
    zk.kill(leader);
    let elected = tokio::task::block_in_place(|| zk.leader());
    assert_ne!(elected, leader, "the killed member still leads");
    let election = killed.elapsed();
    let epoch = |zxid: u64| zxid >> 32;
    let epoch_before = epoch(highest_zxid_before);

    let refused = still_held(&store, held, "after the election").await;
    refused_to_another(&store, held).await;
    stop.store(true, Ordering::Relaxed);
    let seen = calling.await.expect("the calls during the election");
    let before = highest.load(Ordering::Relaxed);
    granted_above(&store, before, "after the election").await;
    eprintln!(
        "member {leader} killed; member {elected} led {election:?} later; the holder's first \
         renewal after that followed {refused} UNAVAILABLE; calls all along: {seen:?}"
    );
    assert!(seen.answered > 0, "no call was answered: {seen:?}");
    let epoch_after = epoch(zk.srvr(elected).expect("the new leader's srvr").zxid);
    assert!(
        epoch_after > epoch_before,
        "an election is a new epoch: {epoch_before} then {epoch_after}"
    );

    tokio::task::block_in_place(|| zk.restart(leader));
    still_held(&store, held, "once the old leader rejoined").await;
    // What the old leader itself serves.
    let through = opened(&zk.member_url(leader)).await;
    let (described, _) = until_answered(Duration::from_secs(30), "describe through it", || {
        through.describe("held")
    })
    .await;
    assert_eq!(
        described.lease.as_ref().map(|lease| lease.fence),
        Some(held),
        "held, as the old leader says: {described:?}"
    );
    a_release_wakes_the_watch_set_before(&store, &watch).await;
}

/// How many client connections member `i` has, as its `stat` says (its
/// `Clients:` lines, the connection asking excepted).
fn clients(zk: &ZooKeeperEnsemble, i: usize) -> usize {
    common::zookeeper::four_letter_word_at(zk.address(i), "stat")
        .map(|stat| {
            stat.lines()
                .filter(|line| line.trim_start().starts_with('/'))
                .count()
                .saturating_sub(1)
        })
        .unwrap_or(0)
}

/// Takes a follower of a three-member ensemble away (the ensemble keeps
/// its leader and its quorum), the one the store's session is on when that
/// is a follower, and checks that the store, whose URL lists all three
/// members, serves every call from the other two: within 20 s, 20
/// acquire-renew-release cycles in a row succeed.
async fn served_by_the_others(away: Away) {
    let mut zk = tokio::task::block_in_place(|| ZooKeeperEnsemble::start(3));
    let store = opened(&zk.url()).await;
    cycle(&store, "warm-up")
        .await
        .expect("a cycle with every member up");
    let leader = tokio::task::block_in_place(|| zk.leader());
    let on: Vec<usize> = zk.members().filter(|&i| clients(&zk, i) > 0).collect();
    let follower = on
        .iter()
        .copied()
        .find(|&i| i != leader)
        .unwrap_or((leader + 1) % 3);
    let sessions_there = on.contains(&follower);
    match away {
        Away::Killed => zk.kill(follower),
        Away::Frozen => zk.pause(follower),
    }

    let since = Instant::now();
    let member = format!("member {follower} of 3 {away} (member {leader} leading)");
    let (failed, cycles) = twenty_cycles_in_a_row(&store, Duration::from_secs(20), &member).await;
    eprintln!(
        "20 cycles in a row {:?} after member {follower} was {away} (the store's session on \
         it: {sessions_there}; clients on members {on:?}); {failed} of {cycles} cycles failed",
        since.elapsed()
    );
    if matches!(away, Away::Frozen) {
        zk.resume(follower);
    }
}

/// A three-member ensemble with a follower killed keeps its leader and its
/// quorum, and the store, whose URL lists all three, serves every call
/// from the other two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_follower_killed_every_call_is_served_by_the_others() {
    served_by_the_others(Away::Killed).await;
}

/// A three-member ensemble with a follower frozen (SIGSTOP) keeps its
/// leader and its quorum, and the store, whose URL lists all three,
/// serves every call from the other two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_follower_frozen_every_call_is_served_by_the_others() {
    served_by_the_others(Away::Frozen).await;
}

/// Waits (at most 30 s) for `notified`, armed before: `what` names it.
async fn woken(notified: impl Future<Output = ()>, what: &str) {
    tokio::time::timeout(Duration::from_secs(30), notified)
        .await
        .unwrap_or_else(|_| panic!("{what} not woken within 30 s"));
}

/// The broker cut off from ZooKeeper (a proxy between them stalls every
/// byte, as a silent network does) longer than its session timeout, so
/// that ZooKeeper expires its session (its places in line, ephemeral nodes
/// of the session, deleted, as another broker sees): once the path is back
/// the store opens a new session, and every lease is still held with its
/// fence (leases are not ephemeral); every watch of the watched name,
/// the two waiters' and an observer's, is woken, though nothing was
/// released; the waiters' places are gone (refresh_places: None), so they
/// take new ones, at the back, which work, as does a release's wake-up of
/// the first of them on the new session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_brokers_session_expired_wakes_its_waiters_and_keeps_every_lease() {
    let zk = ZooKeeperServer::start();
    let proxy = Proxy::start(SocketAddr::from((Ipv4Addr::LOCALHOST, zk.port()))).await;
    let store = opened(&format!("zookeeper://{}", proxy.addr())).await;
    // Another broker, straight to ZooKeeper.
    let other = opened(&zk.url()).await;

    let held = grant(&store, &spec("held", "holder", 60_000)).await;
    let also = grant(&store, &spec("also", "holder", 60_000)).await;
    let waiters = ["waiter-1".to_owned(), "waiter-2".to_owned()];
    for (i, token) in waiters.iter().enumerate() {
        let waiter = GrantSpec {
            queued: true,
            ..spec("held", token, 30_000)
        };
        match ok("acquire", || store.acquire(&waiter)).await {
            Acquired::Blocked(blocked) => assert_eq!(blocked.position, place(i)),
            Acquired::Granted { fence, .. } => panic!("a held name granted: fence {fence}"),
        }
    }
    let first = ok("a watch", || {
        store.watch("held", Event::Released, Some(&waiters[0]))
    })
    .await;
    let second = ok("a watch", || {
        store.watch("held", Event::Released, Some(&waiters[1]))
    })
    .await;
    let observer = ok("watch", || store.watch("held", Event::Released, None)).await;
    assert_eq!(
        ok("refresh_places", || store.refresh_places("held", &waiters)).await,
        [Some(0), Some(1)]
    );
    assert_eq!(
        ok("refresh_places", || other.refresh_places("held", &waiters)).await,
        [Some(0), Some(1)],
        "the places, as another broker sees them"
    );
    // Wake-ups kept from before (none is expected) are no news.
    for watch in [&first, &second, &observer] {
        let _ = watch.notified().now_or_never();
    }
    let (n1, n2, n3) = (first.notified(), second.notified(), observer.notified());
    tokio::pin!(n1, n2, n3);
    n1.as_mut().enable();
    n2.as_mut().enable();
    n3.as_mut().enable();

    let cut = Instant::now();
    proxy.stall();
    // The session's expiry, as ZooKeeper applies it: its ephemeral places
    // deleted (the other broker's own session is not the one expiring).
    common::eventually(
        Duration::from_secs(30),
        "the cut-off broker's places deleted by its session's expiry",
        || {
            let (other, waiters) = (&other, &waiters);
            async move {
                other
                    .refresh_places("held", waiters)
                    .await
                    .is_ok_and(|places| places == [None, None])
            }
        },
    )
    .await;
    let expired = cut.elapsed();
    assert!(
        expired >= SESSION / 2,
        "the places went {expired:?} after the cut, before a session timeout of {SESSION:?}"
    );
    // Meanwhile the leases are untouched, as the other broker sees them.
    assert_eq!(
        ok("check", || other.check("held", "holder")).await,
        renewed_with(held)
    );
    assert_eq!(
        ok("check", || other.check("also", "holder")).await,
        renewed_with(also)
    );
    // Past the client's own give-up (1.4 session timeouts without an
    // answer) too: the fault's length, not a wait for an event.
    tokio::time::sleep((SESSION * 7 / 5).saturating_sub(cut.elapsed()) + TIMEOUT).await;
    let healed = Instant::now();
    proxy.pass();

    woken(n1, "the first waiter").await;
    woken(n2, "the second waiter").await;
    woken(n3, "the observer").await;
    eprintln!(
        "places gone {expired:?} after the cut; every watch woken {:?} after the path came \
         back",
        healed.elapsed()
    );
    let (places, _) = until_answered(Duration::from_secs(30), "refresh the places", || {
        store.refresh_places("held", &waiters)
    })
    .await;
    assert_eq!(
        places,
        [None, None],
        "the places in line went with the session"
    );
    assert_eq!(
        ok("renew", || store.renew("held", "holder", None)).await,
        renewed_with(held),
        "the lease outlived the broker's session"
    );
    assert_eq!(
        ok("renew", || store.renew("also", "holder", None)).await,
        renewed_with(also)
    );

    // The waiters take new places, at the back of the line.
    for (i, token) in waiters.iter().enumerate() {
        let waiter = GrantSpec {
            queued: true,
            ..spec("held", token, 30_000)
        };
        match ok("acquire", || store.acquire(&waiter)).await {
            Acquired::Blocked(blocked) => {
                assert_eq!(blocked.fence, held);
                assert_eq!(blocked.position, place(i));
            }
            Acquired::Granted { fence, .. } => panic!("a held name granted: fence {fence}"),
        }
    }
    assert_eq!(
        ok("refresh_places", || store.refresh_places("held", &waiters)).await,
        [Some(0), Some(1)]
    );
    let first = ok("a watch", || {
        store.watch("held", Event::Released, Some(&waiters[0]))
    })
    .await;
    let notified = first.notified();
    tokio::pin!(notified);
    notified.as_mut().enable();
    assert_eq!(
        ok("release", || store.release("held", "holder")).await,
        Checked::Done(())
    );
    tokio::time::timeout(Duration::from_secs(5), notified)
        .await
        .expect("the release woke the first waiter, on the new session");
    let granted = grant(
        &store,
        &GrantSpec {
            queued: true,
            ..spec("held", &waiters[0], 30_000)
        },
    )
    .await;
    assert!(granted > held, "fence {granted} after {held}");
}

/// The `position` of the `i`th waiter in line (1 = next).
fn place(i: usize) -> u64 {
    u64::try_from(i + 1).expect("a small index")
}

/// A three-member ensemble whose leader (member 0, in a network namespace
/// of its own) is partitioned away (every packet to or from it dropped)
/// while a lease is held: every call is answered right or fails
/// UNAVAILABLE; the other two elect a leader and the store serves from
/// them (the lease renewed with its fence, refused to another, fences
/// rising); and once the partition heals the old leader follows the new
/// one, calls are still answered right, and it serves the lease as held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_partitioned_away_under_a_held_lease_keeps_it_and_fences_rise() {
    let Some(ns) = namespace() else { return };
    // Declared after the namespace: dropped (every member killed) first.
    let zk = tokio::task::block_in_place(|| {
        let mut zk = ZooKeeperEnsemble::start_with_one_in(&ns);
        zk.make_leader(0);
        zk
    });
    // A store whose session is on member 0, the one cut off (a client
    // picks a member of its URL at random): a few tries.
    let mut store = opened(&zk.url()).await;
    let mut on_the_leader = false;
    for _ in 0..20 {
        let before = clients(&zk, 0);
        let candidate = open(&zk.url());
        ok("a ping", || candidate.ping()).await;
        if clients(&zk, 0) > before {
            store = candidate;
            on_the_leader = true;
            break;
        }
    }
    let held = grant(&store, &spec("held", "holder", 60_000)).await;
    let highest = Arc::new(AtomicU64::new(
        grant_and_release(&store, "before", 3).await.max(held),
    ));
    assert_eq!(tokio::task::block_in_place(|| zk.leader()), 0);
    let watch = ok("a watch", || store.watch("held", Event::Released, None)).await;

    let stop = Arc::new(AtomicBool::new(false));
    let calling = tokio::spawn(go_on_calling(
        store.clone(),
        "during",
        held,
        Arc::clone(&highest),
        Arc::clone(&stop),
    ));
    let cut = Instant::now();
    tokio::task::block_in_place(|| ns.isolate());
    let elected =
        tokio::task::block_in_place(|| zk.await_leader_among(&[1, 2], Duration::from_secs(30)));
    let election = cut.elapsed();
    let refused = still_held(&store, held, "with the leader partitioned away").await;
    let served = cut.elapsed();
    let thief = spec("held", "thief", 10_000);
    refused_to_another(&store, held).await;
    stop.store(true, Ordering::Relaxed);
    let seen = calling.await.expect("the calls during the partition");
    let before = highest.load(Ordering::Relaxed);
    let fresh = granted_above(&store, before, "in the partition").await;
    highest.fetch_max(fresh, Ordering::Relaxed);
    eprintln!(
        "member 0 partitioned away (the store's session on it: {on_the_leader}); member \
         {elected} led {election:?} later; the holder's renewal was Done {served:?} after the \
         cut, after {refused} UNAVAILABLE; calls all along: {seen:?}"
    );
    assert!(seen.answered > 0, "no call was answered: {seen:?}");
    assert!(
        seen.slowest.0 < FAIL_WITHIN,
        "{} took {:?} during the partition (store timeout {TIMEOUT:?}): {seen:?}",
        seen.slowest.1,
        seen.slowest.0
    );
    assert!(
        zk.srvr(0).is_none(),
        "member 0 answered through the partition"
    );

    // The heal, with calls going on: the old leader comes back to a higher
    // epoch and follows.
    stop.store(false, Ordering::Relaxed);
    let calling = tokio::spawn(go_on_calling(
        store.clone(),
        "healing",
        held,
        Arc::clone(&highest),
        Arc::clone(&stop),
    ));
    let healed = Instant::now();
    tokio::task::block_in_place(|| ns.heal());
    let leader = tokio::task::block_in_place(|| zk.leader());
    assert_eq!(
        zk.srvr(0).map(|s| s.mode),
        Some(Mode::Follower),
        "member 0 after the heal (member {leader} leads)"
    );
    let back = healed.elapsed();
    still_held(&store, held, "once the old leader rejoined").await;
    stop.store(true, Ordering::Relaxed);
    let seen = calling.await.expect("the calls through the heal");
    eprintln!("member 0 followed {back:?} after the heal; calls all along: {seen:?}");
    assert!(
        seen.slowest.0 < FAIL_WITHIN,
        "{} took {:?} through the heal (store timeout {TIMEOUT:?}): {seen:?}",
        seen.slowest.1,
        seen.slowest.0
    );

    // What the old leader itself serves now.
    let through = opened(&zk.member_url(0)).await;
    let (described, _) = until_answered(Duration::from_secs(30), "describe through 0", || {
        through.describe("held")
    })
    .await;
    assert_eq!(
        described.lease.as_ref().map(|lease| lease.fence),
        Some(held),
        "held, as the old leader says: {described:?}"
    );
    match ok("acquire", || through.acquire(&thief)).await {
        Acquired::Blocked(blocked) => assert_eq!(blocked.fence, held),
        Acquired::Granted { fence, .. } => {
            panic!("held granted through the old leader: fence {fence}")
        }
    }
    let next = grant(&through, &spec("next", "t", 10_000)).await;
    let before = highest.load(Ordering::Relaxed);
    assert!(
        next > before,
        "fence {next} after the heal, {before} before"
    );
    a_release_wakes_the_watch_set_before(&store, &watch).await;
    // Once released, the name is the next holder's, above every fence.
    let taken = grant(&through, &thief).await;
    assert!(taken > next, "fence {taken} after {next}");
}

/// Acquires `spec` every 100 ms until it is granted: its fence. Fails the
/// test if that takes 15 s from `since` (`what` names the lease).
async fn granted_within(store: &Store, spec: &GrantSpec, since: Instant, what: &str) -> u64 {
    loop {
        match ok("an acquire", || store.acquire(spec)).await {
            Acquired::Granted { fence, .. } => return fence,
            Acquired::Blocked(_) => {
                assert!(
                    since.elapsed() < Duration::from_secs(15),
                    "{what}: still held {:?} after the step",
                    since.elapsed()
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// How far the clock-step tests step ZooKeeper's wall clock back.
const AN_HOUR: i64 = 3_600;

/// The server's wall clock stepped an hour back (as a bad NTP source or
/// an operator does): ZooKeeper then stamps writes an hour before the
/// stamps leases were judged by. A lease whose holder is gone must still
/// end within its TTL of the step, not an hour later (it did before
/// 3953817, the stamp read as "an hour before the lease's end"); a lease
/// renewed through the step is never lost; fences keep rising.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_clock_stepped_back_an_hour_ends_an_abandoned_lease_in_its_ttl() {
    let zk = ZooKeeperServer::start_faketime();
    let store = opened(&zk.url()).await;
    let abandoned = grant(&store, &spec("abandoned", "gone", 2_000)).await;
    let kept = grant(&store, &spec("kept", "keeper", 2_000)).await;

    // The keeper renews every 300 ms throughout, each answer checked.
    let stop = Arc::new(AtomicBool::new(false));
    let keeper = tokio::spawn({
        let (store, stop) = (store.clone(), Arc::clone(&stop));
        async move {
            let mut renewals = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let (renewed, _) =
                    until_answered(Duration::from_secs(1), "the keeper's renewal", || {
                        store.renew("kept", "keeper", None)
                    })
                    .await;
                assert_eq!(
                    renewed,
                    Checked::Done(Renewed {
                        ttl_ms: 2_000,
                        fence: kept
                    }),
                    "the keeper's renewal {renewals} around the step"
                );
                renewals += 1;
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            renewals
        }
    });

    zk.set_clock_offset(-AN_HOUR);
    let stepped = Instant::now();
    let fence = granted_within(
        &store,
        &spec("abandoned", "next", 2_000),
        stepped,
        "the abandoned lease (TTL 2 s) after the clock stepped an hour back",
    )
    .await;
    eprintln!(
        "the abandoned lease granted to the next {:?} after the step",
        stepped.elapsed()
    );
    assert!(
        fence > abandoned.max(kept),
        "fence {fence} after {abandoned} and {kept}"
    );
    assert_eq!(
        ok("the gone holder's renewal", || store.renew(
            "abandoned",
            "gone",
            None
        ))
        .await,
        Checked::ExpiredReported,
        "the gone holder, its expiry reported by the next grant"
    );

    stop.store(true, Ordering::Relaxed);
    let renewals = keeper.await.expect("the keeper");
    assert!(renewals >= 3, "the keeper renewed {renewals} times");
    // A store that never saw a fence (a broker started after the step)
    // grants above them too.
    let newcomer = opened(&zk.url()).await;
    let later = grant(&newcomer, &spec("later", "t", 2_000)).await;
    assert!(later > fence, "fence {later} after {fence}");
}

/// The server's wall clock stepped forward a minute, past the TTL of a
/// held lease: by ZooKeeper's clock the lease ended, and it is granted to
/// the next at once, with a higher fence: the overlap a clock step causes,
/// which the fence lets the resource refuse. The overtaken holder is never
/// answered Done again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_clock_stepped_forward_ends_leases_early_and_fences_still_rise() {
    let zk = ZooKeeperServer::start_faketime();
    let store = opened(&zk.url()).await;
    let first = grant(&store, &spec("held", "first", 30_000)).await;
    let next = spec("held", "next", 30_000);
    match ok("an acquire before the step", || store.acquire(&next)).await {
        Acquired::Blocked(blocked) => assert_eq!(blocked.fence, first),
        granted @ Acquired::Granted { .. } => panic!("granted twice: {granted:?}"),
    }

    // The broker's health ping (every --health-interval, 1 s) reads the
    // store's clock; between two stamps a broker estimates the leader's
    // time from the last (`estimated_now`), so it sees a step at its next
    // ping or write.
    let pinger = tokio::spawn({
        let store = store.clone();
        async move {
            loop {
                let _ = store.ping().await;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    });
    zk.set_clock_offset(60);
    let stepped = Instant::now();
    let second = granted_within(
        &store,
        &next,
        stepped,
        "a lease of 30 s after the clock stepped 60 s forward (the store pinged every second)",
    )
    .await;
    eprintln!(
        "the lease ended and granted to the next {:?} after the step",
        stepped.elapsed()
    );
    pinger.abort();
    assert!(second > first, "fence {second} after {first}");
    let overtaken = ok("the overtaken holder's renewal", || {
        store.renew("held", "first", None)
    })
    .await;
    assert_eq!(
        overtaken,
        Checked::ExpiredReported,
        "the overtaken holder, its expiry reported by the next grant"
    );
    assert_eq!(
        ok("the new holder's renewal", || store
            .renew("held", "next", None))
        .await,
        Checked::Done(Renewed {
            ttl_ms: 30_000,
            fence: second
        })
    );
}
