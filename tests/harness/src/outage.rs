//! Store calls around a store's outage, shared by the etcd and ZooKeeper
//! failure tests (`tests/etcd.rs`, `tests/zookeeper_failures.rs`): calls
//! that must fail UNAVAILABLE in time while the store is away, calls retried
//! until it answers again, a client calling all along through a fault, and
//! cycles that must go on while a member is away. What differs between the
//! two stores (how a grant is retried, what is held before the fault, how
//! the same store comes back) stays in each test file.

use std::{
    future::Future,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use futures_util::FutureExt;
use leasehold_server::{
    store::{Acquired, Checked, Event, GrantSpec, Renewed, Store},
    Error,
};

use crate::NetNs;

/// The store timeout of every store the failure tests open.
pub const TIMEOUT: Duration = Duration::from_secs(1);

/// How long a call may take to fail while the store is away: the store
/// timeout and a margin for a loaded machine (a call that hangs never gets
/// there).
pub const FAIL_WITHIN: Duration = Duration::from_secs(3);

/// The store whose outage a test checks, as the calls checked by
/// [`every_call_refused_in_time`] name it and call it.
#[derive(Clone, Copy, Debug)]
pub struct Outage {
    /// Its name in messages: `etcd`, `ZooKeeper`.
    pub store: &'static str,
}

/// A grant request of one permit, not queued, no lock delay, for holder
/// `test`.
pub fn spec(name: &str, token: &str, ttl_ms: u64) -> GrantSpec {
    GrantSpec {
        name: name.into(),
        token: token.into(),
        holder: "test".into(),
        ttl_ms,
        lock_delay_ms: 0,
        limit: 1,
        queued: false,
    }
}

/// The holder's renewal, answered Done with `fence` and a TTL of 60 s (the
/// TTL the failure tests hold `held` with).
pub fn renewed_with(fence: u64) -> Checked<Renewed> {
    Checked::Done(Renewed {
        ttl_ms: 60_000,
        fence,
    })
}

/// Calls `call` until it answers, for at most `limit`, taking only
/// UNAVAILABLE for "not yet" (any other error fails the test): the answer,
/// and how many calls were UNAVAILABLE before it.
pub async fn until_answered<T, F, Fut>(limit: Duration, what: &str, mut call: F) -> (T, u32)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = leasehold_server::Result<T>>,
{
    let deadline = Instant::now() + limit;
    let mut refused = 0;
    loop {
        match call().await {
            Ok(answer) => return (answer, refused),
            Err(Error::Unavailable(why)) => {
                assert!(
                    Instant::now() < deadline,
                    "{what}: still UNAVAILABLE after {limit:?} ({refused} tries): {why}"
                );
                refused += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("{what}: {e:?} (only UNAVAILABLE may say the store is away)"),
        }
    }
}

/// Checks that `call` fails UNAVAILABLE within [`FAIL_WITHIN`]; `what`
/// names it, `outage` the store that is away. The answer is written out,
/// if any.
pub async fn refused_in_time(
    outage: Outage,
    what: &str,
    call: impl Future<Output = leasehold_server::Result<String>>,
) {
    let started = Instant::now();
    let outcome = tokio::time::timeout(FAIL_WITHIN * 10, call)
        .await
        .unwrap_or_else(|_| panic!("{what} hung for {:?}", FAIL_WITHIN * 10));
    let took = started.elapsed();
    assert!(
        matches!(outcome, Err(Error::Unavailable(_))),
        "{what} with {} away: {outcome:?}",
        outage.store
    );
    assert!(
        took < FAIL_WITHIN,
        "{what} took {took:?} to fail (store timeout {TIMEOUT:?}): {outcome:?}"
    );
}

/// Every kind of store call but a watch ([`a_watch_refused_in_time`]),
/// a listing included, `rounds` times over, fails UNAVAILABLE within
/// [`FAIL_WITHIN`]. `held` and `spare` are names held with the tokens
/// `holder` and `spare`: calls on `held` read it or renew it as it is,
/// the writes that change a lease (a new TTL, a release, a revoke) go to
/// `spare`, since a write cut at the timeout may still be applied once the
/// store answers again.
pub async fn every_call_refused_in_time(store: &Store, outage: Outage, rounds: u32) {
    let debug = |answer: &dyn std::fmt::Debug| format!("{answer:?}");
    for round in 0..rounds {
        let r = |what: &str| format!("round {round}: {what}");
        refused_in_time(
            outage,
            &r("an acquire of a free name"),
            store
                .acquire(&spec("free", "someone", 10_000))
                .map(|a| a.map(|a| debug(&a))),
        )
        .await;
        refused_in_time(
            outage,
            &r("an acquire of the held name"),
            store
                .acquire(&spec("held", "thief", 10_000))
                .map(|a| a.map(|a| debug(&a))),
        )
        .await;
        refused_in_time(
            outage,
            &r("a renewal"),
            store
                .renew("held", "holder", None)
                .map(|a| a.map(|a| debug(&a))),
        )
        .await;
        refused_in_time(
            outage,
            &r("a renewal with a new TTL"),
            store
                .renew("spare", "spare", Some(90_000))
                .map(|a| a.map(|a| debug(&a))),
        )
        .await;
        refused_in_time(
            outage,
            &r("a check"),
            store.check("held", "holder").map(|a| a.map(|a| debug(&a))),
        )
        .await;
        refused_in_time(
            outage,
            &r("a describe"),
            store.describe("held").map(|a| a.map(|a| debug(&a))),
        )
        .await;
        refused_in_time(
            outage,
            &r("a release"),
            store
                .release("spare", "spare")
                .map(|a| a.map(|a| debug(&a))),
        )
        .await;
        refused_in_time(
            outage,
            &r("a revoke"),
            store.revoke("spare").map(|a| a.map(|a| debug(&a))),
        )
        .await;
        refused_in_time(
            outage,
            &r("a dequeue"),
            store.dequeue("held", "thief").map(|a| a.map(|a| debug(&a))),
        )
        .await;
        refused_in_time(
            outage,
            &r("a refresh of places"),
            store
                .refresh_places("held", &["thief".to_owned()])
                .map(|a| a.map(|a| debug(&a))),
        )
        .await;
        refused_in_time(
            outage,
            &r("a listing"),
            store.list("", None, 10).map(|a| a.map(|a| debug(&a))),
        )
        .await;
        refused_in_time(
            outage,
            &r("a ping"),
            store.ping().map(|a| a.map(|a| debug(&a))),
        )
        .await;
    }
}

/// A watch of `name`, not watched yet, fails UNAVAILABLE within
/// [`FAIL_WITHIN`].
pub async fn a_watch_refused_in_time(store: &Store, outage: Outage, name: &str) {
    refused_in_time(
        outage,
        &format!("a watch of {name}"),
        store
            .watch(name, Event::Released, None)
            .map(|w| w.map(|_| "a watch".to_owned())),
    )
    .await;
}

/// What a client saw while it went on calling through a fault
/// ([`go_on_calling`]).
#[derive(Debug, Default)]
pub struct Seen {
    /// Calls answered (and answered right).
    pub answered: u32,
    /// Calls that failed UNAVAILABLE.
    pub unavailable: u32,
    /// The call that took longest, answered or refused, and how long.
    pub slowest: (Duration, &'static str),
}

/// Calls in a loop until `stop`: renews `held` (must be Done with its
/// fence, a TTL of 60 s), tries to take it (must be Blocked by that fence),
/// and grants and releases fresh names under `prefix` (each fence above
/// every one granted before, `highest` kept up to date); any of them may
/// fail UNAVAILABLE, nothing else. Owns what it is given, to be spawned
/// beside the fault.
pub async fn go_on_calling(
    store: Store,
    prefix: &'static str,
    held: u64,
    highest: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) -> Seen {
    let mut seen = Seen::default();
    let mut count = |outcome: &leasehold_server::Result<()>, what: &'static str, at: Instant| {
        match outcome {
            Ok(()) => seen.answered += 1,
            Err(Error::Unavailable(_)) => seen.unavailable += 1,
            Err(e) => panic!("{what} during the fault: {e:?}"),
        }
        seen.slowest = seen.slowest.max((at.elapsed(), what));
    };
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        let at = Instant::now();
        let renewed = store.renew("held", "holder", None).await.map(|renewed| {
            assert_eq!(
                renewed,
                renewed_with(held),
                "the holder's renewal during the fault"
            );
        });
        count(&renewed, "a renewal", at);
        let at = Instant::now();
        let taken = store
            .acquire(&spec("held", "thief", 10_000))
            .await
            .map(|acquired| match acquired {
                Acquired::Blocked(blocked) => assert_eq!(blocked.fence, held),
                Acquired::Granted { fence, .. } => {
                    panic!("held granted to another during the fault: fence {fence}")
                }
            });
        count(&taken, "an acquire of the held name", at);
        let name = format!("{prefix}/{i}");
        let before = highest.load(Ordering::Relaxed);
        let at = Instant::now();
        let granted =
            store
                .acquire(&spec(&name, "t", 10_000))
                .await
                .map(|acquired| match acquired {
                    Acquired::Granted { fence, .. } => {
                        assert!(fence > before, "fence {fence} after {before}");
                        highest.fetch_max(fence, Ordering::Relaxed);
                    }
                    Acquired::Blocked(blocked) => {
                        panic!("{name}, never granted, blocked: {blocked:?}")
                    }
                });
        count(&granted, "an acquire of a fresh name", at);
        if granted.is_ok() {
            let at = Instant::now();
            let released = store.release(&name, "t").await.map(|released| {
                assert!(
                    matches!(released, Checked::Done(()) | Checked::Released),
                    "{name}'s release: {released:?}"
                );
            });
            count(&released, "a release", at);
        }
    }
    seen
}

/// The holder's renewal of `held` once the store serves again (retried
/// while UNAVAILABLE, for up to 30 s) is Done with its fence, `fence`, and
/// a TTL of 60 s: a fault the store rides out keeps a held lease. `when`
/// says when, in the message; how many calls were UNAVAILABLE first.
pub async fn still_held(store: &Store, fence: u64, when: &str) -> u32 {
    let (renewed, refused) = until_answered(Duration::from_secs(30), "renew held", || {
        store.renew("held", "holder", None)
    })
    .await;
    assert_eq!(renewed, renewed_with(fence), "the holder's renewal {when}");
    refused
}

/// Another's acquire of `held` (retried while UNAVAILABLE, for up to
/// 30 s) is Blocked by the holder's fence, `fence`: a fault never grants
/// a held lease twice.
pub async fn refused_to_another(store: &Store, fence: u64) {
    let thief = spec("held", "thief", 10_000);
    let (taken, _) = until_answered(Duration::from_secs(30), "acquire held", || {
        store.acquire(&thief)
    })
    .await;
    match taken {
        Acquired::Blocked(blocked) => assert_eq!(blocked.fence, fence),
        Acquired::Granted { fence, .. } => panic!("held granted twice: fence {fence}"),
    }
}

/// The grant of the fresh name `fresh` (retried while UNAVAILABLE, for up
/// to 30 s) has a fence above `before`, every fence granted before the
/// fault: fences rise through it. `when` says when, in the message; the
/// fence.
pub async fn granted_above(store: &Store, before: u64, when: &str) -> u64 {
    let free = spec("fresh", "t", 10_000);
    let (fresh, _) = until_answered(Duration::from_secs(30), "acquire fresh", || {
        store.acquire(&free)
    })
    .await;
    match fresh {
        Acquired::Granted { fence, .. } => {
            assert!(fence > before, "fence {fence} {when}, {before} before");
            fence
        }
        Acquired::Blocked(blocked) => panic!("a free name blocked: {blocked:?}"),
    }
}

/// One acquire, renew and release of a fresh name: `Err` only as the store
/// failed it (a wrong answer fails the test).
pub async fn cycle(store: &Store, name: &str) -> leasehold_server::Result<()> {
    match store.acquire(&spec(name, "t", 10_000)).await? {
        Acquired::Granted { fence, .. } => {
            assert_eq!(
                store.renew(name, "t", None).await?,
                Checked::Done(Renewed {
                    ttl_ms: 10_000,
                    fence
                })
            );
        }
        Acquired::Blocked(blocked) => panic!("{name}, never granted, blocked: {blocked:?}"),
    }
    assert_eq!(store.release(name, "t").await?, Checked::Done(()));
    Ok(())
}

/// Runs [`cycle`] on fresh names until 20 in a row succeed, failing the
/// test if that takes `limit` (`member` says which member is away, and
/// how); only UNAVAILABLE may fail a cycle, and starts the count again:
/// how many cycles failed, of how many.
pub async fn twenty_cycles_in_a_row(store: &Store, limit: Duration, member: &str) -> (u32, u32) {
    let since = Instant::now();
    let (mut streak, mut failed, mut cycles) = (0, 0, 0);
    let mut last = String::new();
    while streak < 20 {
        assert!(
            since.elapsed() < limit,
            "with {member}, {failed} of {cycles} cycles failed within {limit:?}, the last \
             with: {last}"
        );
        cycles += 1;
        match cycle(store, &format!("n/{cycles}")).await {
            Ok(()) => streak += 1,
            Err(Error::Unavailable(why)) => {
                streak = 0;
                failed += 1;
                last = why;
            }
            Err(e) => panic!("cycle {cycles}: {e:?}"),
        }
    }
    (failed, cycles)
}

/// How a member is taken away.
#[derive(Clone, Copy, Debug)]
pub enum Away {
    /// SIGKILL: its port refuses connections.
    Killed,
    /// SIGSTOP: its port accepts connections, and it answers nothing.
    Frozen,
}

impl std::fmt::Display for Away {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Away::Killed => "killed",
            Away::Frozen => "frozen",
        })
    }
}

/// A network namespace for a partition test, or `None`, having told the
/// test harness' capture why the test is skipped: only when creating one
/// is not permitted (not root).
pub fn namespace() -> Option<NetNs> {
    match NetNs::new() {
        Ok(ns) => Some(ns),
        Err(e) => {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "skipped: {e}");
            None
        }
    }
}
