//! Keeping a place in line across Acquire calls (keep_place / place): a wait
//! longer than the broker's --max-wait, made of calls one after the other,
//! keeps its turn; callers that do not ask see no change. Run on every
//! store (memory, Redis, PostgreSQL), and on the shared stores across two
//! replicas (the place lives in the store).

use leasehold_testkit as common;

use std::time::Duration;

use common::{
    acquire_req, eventually, must_acquire, Broker, PostgresServer, RedisServer, StoreServer,
};
use leasehold_server::proto::{
    leasehold_service_client::LeaseholdServiceClient, AcquireRequest, AcquireResponse,
    CampaignRequest, DescribeRequest, Lease, ReleaseRequest,
};
use tokio::task::JoinHandle;
use tonic::{transport::Channel, Code, Response, Status};

const PLACE: &str = "leasehold-place";

/// Waiter B's TTL, which tells its lease from A's (30 s).
const B_TTL: u64 = 20_000;

type Client = LeaseholdServiceClient<Channel>;
type Pending = JoinHandle<Result<Response<AcquireResponse>, Status>>;

/// The stores to run on: for each, the broker of the first calls, another
/// replica a waiter comes back to (on Redis and PostgreSQL: the place
/// lives in the store; the memory store is one broker's own), and the
/// server to keep alive.
async fn setups() -> Vec<(&'static str, Broker, Option<Broker>, Option<StoreServer>)> {
    let redis = RedisServer::start();
    let first = Broker::start(&redis.url()).await;
    let second = Broker::start(&redis.url()).await;
    let postgres = PostgresServer::start();
    let on_postgres = Broker::start(&postgres.url()).await;
    let again_on_postgres = Broker::start(&postgres.url()).await;
    vec![
        ("memory", Broker::start("memory").await, None, None),
        (
            "redis",
            first,
            Some(second),
            Some(StoreServer::Redis(redis)),
        ),
        (
            "postgres",
            on_postgres,
            Some(again_on_postgres),
            Some(StoreServer::Postgres(postgres)),
        ),
    ]
}

async fn waiters(client: &Client, name: &str) -> u64 {
    client
        .clone()
        .describe(DescribeRequest {
            name: name.into(),
            ..Default::default()
        })
        .await
        .expect("describe")
        .into_inner()
        .waiters
}

async fn until_waiters(client: &Client, name: &str, n: u64, what: &str) {
    eventually(Duration::from_secs(10), what, || {
        let c = client.clone();
        let name = name.to_owned();
        async move { waiters(&c, &name).await == n }
    })
    .await;
}

fn spawn_acquire(client: &Client, request: AcquireRequest) -> Pending {
    let mut client = client.clone();
    tokio::spawn(async move { client.acquire(request).await })
}

async fn release(client: &Client, name: &str, owner_token: String) {
    client
        .clone()
        .release(ReleaseRequest {
            name: name.into(),
            owner_token,
        })
        .await
        .expect("release");
}

/// The line every test here starts from: `name` held, waiter A (keeping its
/// place or not) and then waiter B queued behind it, until A's wait of
/// `a_wait_ms` runs out. Returns the holder's lease, B's pending call and
/// A's refusal.
async fn b_behind_a_refused(
    client: &Client,
    name: &str,
    keep_place: bool,
    a_wait_ms: u64,
) -> (Lease, Pending, Status) {
    let holder = must_acquire(&mut client.clone(), name, 60_000).await;
    let a = spawn_acquire(
        client,
        AcquireRequest {
            keep_place,
            ..acquire_req(name, 30_000, "a", a_wait_ms)
        },
    );
    until_waiters(client, name, 1, "A to queue").await;
    let b = spawn_acquire(client, acquire_req(name, B_TTL, "b", 60_000));
    until_waiters(client, name, 2, "B to queue behind A").await;
    assert!(!a.is_finished(), "B queued while A's call waited");
    let refused = a.await.unwrap().expect_err("A's wait runs out");
    assert_eq!(refused.code(), Code::Aborted, "{refused:?}");
    (holder, b, refused)
}

/// The place a refusal kept, from its metadata.
fn kept_place(refused: &Status) -> Option<String> {
    refused
        .metadata()
        .get(PLACE)
        .map(|v| v.to_str().expect("an ASCII place").to_owned())
}

/// The lease a pending Acquire was granted.
async fn granted(pending: Pending, what: &str) -> Lease {
    pending
        .await
        .unwrap()
        .unwrap_or_else(|s| panic!("{what}: {s:?}"))
        .into_inner()
        .lease
        .unwrap()
}

/// Waiter A keeps its place; B arrives while A's call waits; A's wait runs
/// out and A comes back (on Redis: to another replica) with its place; when
/// the holder releases, A is granted before B, with its place as its owner
/// token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_place_keeps_its_turn() {
    for (store, broker, again, _redis) in setups().await {
        let name = "kept";
        let client = broker.client().await;
        let (holder, b, refused) = b_behind_a_refused(&client, name, true, 3_000).await;
        assert!(
            refused.message().contains("place in line is kept"),
            "{store}: {}",
            refused.message()
        );
        let place =
            kept_place(&refused).unwrap_or_else(|| panic!("{store}: no {PLACE} in {refused:?}"));
        assert_eq!(place.len(), 32, "{store}: {place}");
        assert!(
            !refused.message().contains(&place),
            "{store}: the place is not in the message"
        );
        assert_eq!(waiters(&client, name).await, 2, "{store}: A's place stays");

        // The waiters of the broker A comes back to: A, and B if that is
        // B's broker too.
        let local = if again.is_some() { 1 } else { 2 };
        let again = again.as_ref().unwrap_or(&broker).client().await;
        let a = spawn_acquire(
            &again,
            AcquireRequest {
                keep_place: true,
                place: place.clone(),
                ..acquire_req(name, 30_000, "a", 30_000)
            },
        );
        eventually(Duration::from_secs(10), "A to wait again", || {
            let c = again.clone();
            async move { common::local_waiters(&mut c.clone(), name).await == local }
        })
        .await;
        assert_eq!(
            waiters(&client, name).await,
            2,
            "{store}: A took its place back"
        );

        release(&client, name, holder.owner_token).await;
        let first = granted(a, &format!("{store}: A is granted first")).await;
        assert_eq!(first.owner_token, place, "{store}: the place is the token");
        assert!(!b.is_finished(), "{store}: B waits behind A");
        release(&again, name, first.owner_token).await;
        let b = granted(b, "then B").await;
        assert_eq!(b.ttl_ms, B_TTL, "{store}: B (by its TTL)");
        assert!(b.fence > first.fence, "{store}");
    }
}

/// Without keep_place nothing changes: the refusal carries no place, the
/// place is given up at once, and a waiter that arrived meanwhile is next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_keep_place_the_place_is_given_up() {
    for (store, broker, _, _redis) in setups().await {
        let name = "given-up";
        let client = broker.client().await;
        let (holder, b, refused) = b_behind_a_refused(&client, name, false, 1_500).await;
        assert!(kept_place(&refused).is_none(), "{store}: {refused:?}");
        assert!(
            !refused.message().contains("kept"),
            "{store}: {}",
            refused.message()
        );
        assert_eq!(waiters(&client, name).await, 1, "{store}: A left the line");

        release(&client, name, holder.owner_token).await;
        let b = granted(b, "B is next").await;
        assert_eq!(b.ttl_ms, B_TTL, "{store}: B (by its TTL)");
    }
}

/// A place that is not an owner token's form is refused with a message that
/// says what to pass.
#[tokio::test]
async fn a_malformed_place_is_invalid() {
    let broker = Broker::start("memory").await;
    let mut client = broker.client().await;
    for bogus in [
        "not-a-place",
        "0123456789ABCDEF0123456789ABCDEF",
        "0123456789abcdef0123456789abcdef0",
    ] {
        let refused = client
            .acquire(AcquireRequest {
                place: bogus.into(),
                ..acquire_req("bogus", 10_000, "", 1_000)
            })
            .await
            .expect_err("refused");
        assert_eq!(
            refused.code(),
            Code::InvalidArgument,
            "{bogus}: {refused:?}"
        );
        assert!(
            refused
                .message()
                .contains("place in line passed back is not 32 lowercase hex"),
            "{}",
            refused.message()
        );
    }
}

/// A place not taken back within its lifetime (3 s) lapses: the caller
/// that comes back with it joins at the back, behind the waiter that had
/// been behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapsed_place_joins_at_the_back() {
    for (store, broker, _, _redis) in setups().await {
        let name = "lapsed";
        let client = broker.client().await;
        let (holder, b, refused) = b_behind_a_refused(&client, name, true, 1_000).await;
        let place = kept_place(&refused).expect("a place");

        // Nobody refreshes a kept place: it lapses after its 3 s.
        until_waiters(&client, name, 1, "A's kept place to lapse").await;

        let a = spawn_acquire(
            &client,
            AcquireRequest {
                keep_place: true,
                place: place.clone(),
                ..acquire_req(name, 30_000, "a", 30_000)
            },
        );
        until_waiters(&client, name, 2, "A to queue again, at the back").await;
        release(&client, name, holder.owner_token).await;
        let b = granted(b, "B is next").await;
        assert_eq!(b.ttl_ms, B_TTL, "{store}: B (by its TTL)");
        assert!(!a.is_finished(), "{store}: A waits behind B");
        release(&client, name, b.owner_token).await;
        let a = granted(a, "then A").await;
        // A place no longer in line is not taken as a token: A waited
        // with a fresh one.
        assert_ne!(a.owner_token, place, "{store}");
    }
}

/// A place is honoured only while it is in line: a well-formed place that
/// is a released owner token, or the caller's own live owner token, gets a
/// fresh token (nobody chooses an owner token), and the records of those
/// tokens are untouched: the released one is still told "released", the
/// live one still holds its lease with its own TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_place_not_in_line_is_never_taken_as_a_token() {
    for (store, broker, _, _server) in setups().await {
        let client = broker.client().await;
        let released = must_acquire(&mut client.clone(), "chosen", 60_000).await;
        release(&client, "chosen", released.owner_token.clone()).await;
        let lease = granted(
            spawn_acquire(
                &client,
                AcquireRequest {
                    place: released.owner_token.clone(),
                    ..acquire_req("chosen", 60_000, "chooser", 1_000)
                },
            ),
            "a free lock, place or not",
        )
        .await;
        assert_ne!(
            lease.owner_token, released.owner_token,
            "{store}: granted under a released token"
        );
        // The lock is held by the new lease: its release frees it.
        release(&client, "chosen", lease.owner_token.clone()).await;
        let d = client
            .clone()
            .describe(DescribeRequest {
                name: "chosen".into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert!(!d.held, "{store}: released, yet held: {d:?}");

        let live = must_acquire(&mut client.clone(), "mine", 60_000).await;
        let refused = client
            .clone()
            .acquire(AcquireRequest {
                place: live.owner_token.clone(),
                ..acquire_req("mine", 3_600_000, "again", 0)
            })
            .await
            .expect_err("held by the caller's own live lease");
        assert_eq!(refused.code(), Code::Aborted, "{store}: held: {refused:?}");
        let d = client
            .clone()
            .describe(DescribeRequest {
                name: "mine".into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            (d.fence, d.ttl_ms),
            (live.fence, 60_000),
            "{store}: the live lease untouched"
        );
    }
}

/// A candidate's Campaign keeps its place the same way: the candidate that
/// comes back with its place becomes leader before the one that arrived
/// during its first call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_keeps_its_place() {
    for (store, broker, _, _redis) in setups().await {
        let name = "leader";
        let client = broker.client().await;
        let campaign = |value: &str, wait_timeout_ms, keep_place, place: &str| CampaignRequest {
            election: name.into(),
            value: value.into(),
            ttl_ms: 30_000,
            wait_timeout_ms,
            keep_place,
            place: place.into(),
        };
        let leader = client
            .clone()
            .campaign(campaign("first", 0, false, ""))
            .await
            .expect("the first candidate leads")
            .into_inner()
            .lease
            .unwrap();
        let mut c = client.clone();
        let req = campaign("a", 1_500, true, "");
        let a = tokio::spawn(async move { c.campaign(req).await });
        until_waiters(&client, name, 1, "A to queue").await;
        let mut c = client.clone();
        let req = campaign("b", 60_000, false, "");
        let b = tokio::spawn(async move { c.campaign(req).await });
        until_waiters(&client, name, 2, "B to queue behind A").await;
        let refused = a.await.unwrap().expect_err("A's wait runs out");
        assert_eq!(refused.code(), Code::Aborted, "{store}: {refused:?}");
        let place = refused
            .metadata()
            .get(PLACE)
            .expect("a place")
            .to_str()
            .unwrap()
            .to_owned();

        let mut c = client.clone();
        let req = campaign("a", 30_000, true, &place);
        let a = tokio::spawn(async move { c.campaign(req).await });
        eventually(Duration::from_secs(10), "A to campaign again", || {
            let c = client.clone();
            async move { common::local_waiters(&mut c.clone(), name).await == 2 }
        })
        .await;
        release(&client, name, leader.owner_token).await;
        let a = a
            .await
            .unwrap()
            .expect("A leads next")
            .into_inner()
            .lease
            .unwrap();
        assert_eq!(a.owner_token, place, "{store}");
        assert!(!b.is_finished(), "{store}: B waits behind A");
        release(&client, name, a.owner_token).await;
        b.await.unwrap().expect("then B");
    }
}
