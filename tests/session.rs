//! The Session stream: acquire, renew, release and heartbeats multiplexed on
//! one stream, answered by id and out of order, with per-request timeouts
//! and cancellation; and what each way of ending the stream does to its
//! requests in flight and its leases.

use leasehold_testkit as common;

use std::{collections::HashMap, time::Duration};

use common::{acquire_req, eventually, sample, scrape, Broker, RedisServer};
use leasehold_server::proto::{
    lease_status::State, leasehold_service_client::LeaseholdServiceClient,
    session_request::Request, session_response::Response, AcquireRequest, DescribeRequest,
    KeepAliveRequest, LeaseRef, ReleaseRequest, RenewRequest, SessionCancel, SessionError,
    SessionRequest, SessionResponse,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{transport::Channel, Code, Streaming};

/// A Session stream as a test drives it: requests sent with chosen ids,
/// answers collected by id whatever their order.
struct Session {
    tx: mpsc::Sender<SessionRequest>,
    rx: Streaming<SessionResponse>,
    /// Answers read while waiting for another id.
    early: HashMap<u64, Response>,
}

impl Session {
    async fn open(client: &mut LeaseholdServiceClient<Channel>) -> Session {
        let (tx, rx) = mpsc::channel(64);
        let rx = client
            .session(ReceiverStream::new(rx))
            .await
            .expect("a Session stream")
            .into_inner();
        Session {
            tx,
            rx,
            early: HashMap::new(),
        }
    }

    async fn send(&self, id: u64, timeout_ms: u64, request: Request) {
        self.tx
            .send(SessionRequest {
                id,
                timeout_ms,
                request: Some(request),
            })
            .await
            .expect("the stream takes requests");
    }

    /// The answer to `id`, reading (and keeping) the others that come first.
    async fn answer(&mut self, id: u64) -> Response {
        if let Some(response) = self.early.remove(&id) {
            return response;
        }
        loop {
            let message = tokio::time::timeout(Duration::from_secs(30), self.rx.message())
                .await
                .expect("an answer within 30 s")
                .expect("the stream goes on")
                .expect("an answer, not the stream's end");
            let response = message.response.expect("every answer has a response");
            if message.id == id {
                return response;
            }
            assert!(
                self.early.insert(message.id, response).is_none(),
                "id {} answered twice",
                message.id
            );
        }
    }

    /// Sends `request` as `id` and returns its answer.
    async fn call(&mut self, id: u64, request: Request) -> Response {
        self.send(id, 0, request).await;
        self.answer(id).await
    }

    async fn acquire(&mut self, id: u64, request: AcquireRequest) -> Response {
        self.call(id, Request::Acquire(request)).await
    }
}

fn granted(response: Response) -> leasehold_server::proto::Lease {
    match response {
        Response::Acquire(a) => a.lease.expect("a lease"),
        other => panic!("not a grant: {other:?}"),
    }
}

fn error(response: Response) -> SessionError {
    match response {
        Response::Error(e) => *e,
        other => panic!("not an error: {other:?}"),
    }
}

fn code(e: &SessionError) -> Code {
    Code::from_i32(e.code)
}

fn release(lease: &leasehold_server::proto::Lease) -> Request {
    Request::Release(ReleaseRequest {
        name: lease.name.clone(),
        owner_token: lease.owner_token.clone(),
    })
}

async fn described(
    client: &mut LeaseholdServiceClient<Channel>,
    name: &str,
) -> leasehold_server::proto::DescribeResponse {
    client
        .describe(DescribeRequest {
            name: name.into(),
            ..Default::default()
        })
        .await
        .expect("describe")
        .into_inner()
}

/// A holder's whole life on one stream: grant, renew, release; each answer
/// what the unary call would answer, and the fence rises per grant.
#[tokio::test]
async fn acquire_renew_release_on_one_stream() {
    let broker = Broker::start("memory").await;
    let mut client = broker.client().await;
    let mut session = Session::open(&mut client).await;
    let lease = granted(session.acquire(1, acquire_req("job", 5_000, "a", 0)).await);
    assert_eq!((lease.name.as_str(), lease.ttl_ms), ("job", 5_000));
    assert_eq!(lease.owner_token.len(), 32);
    assert!(described(&mut client, "job").await.held);
    match session
        .call(
            2,
            Request::Renew(RenewRequest {
                name: "job".into(),
                owner_token: lease.owner_token.clone(),
                ttl_ms: 8_000,
                ..Default::default()
            }),
        )
        .await
    {
        Response::Renew(r) => assert_eq!((r.ttl_ms, r.fence), (8_000, lease.fence)),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        session.call(3, release(&lease)).await,
        Response::Release(_)
    ));
    assert!(!described(&mut client, "job").await.held);
    // Released twice: idempotent, as the unary call.
    assert!(matches!(
        session.call(4, release(&lease)).await,
        Response::Release(_)
    ));
    let next = granted(session.acquire(5, acquire_req("job", 5_000, "a", 0)).await);
    assert!(next.fence > lease.fence);
}

/// Refusals carry the unary call's code and message; a stranger's token
/// changes nothing; an empty request and a reused id are refused without
/// ending the stream or the request in flight.
#[tokio::test]
async fn refusals_are_answers_with_the_unary_code_and_the_stream_goes_on() {
    let broker = Broker::start("memory").await;
    let mut client = broker.client().await;
    let mut session = Session::open(&mut client).await;
    let lease = granted(
        session
            .acquire(1, acquire_req("held", 30_000, "owner", 0))
            .await,
    );

    let busy = error(
        session
            .acquire(2, acquire_req("held", 30_000, "other", 0))
            .await,
    );
    assert_eq!(code(&busy), Code::Aborted, "{busy:?}");
    assert!(busy.message.contains("'owner'"), "{}", busy.message);
    assert!(busy.place.is_empty());
    // For programs, as the unary call's ErrorInfo and RetryInfo: who holds
    // it, and for how long.
    assert_eq!(busy.reason, "LOCK_HELD");
    assert_eq!(
        busy.metadata.get("holder").map(String::as_str),
        Some("owner")
    );
    assert_eq!(
        busy.metadata.get("fence").map(String::as_str),
        Some(lease.fence.to_string().as_str())
    );
    let remaining: u64 = busy.metadata["remaining_ms"].parse().unwrap();
    assert!(remaining > 20_000 && remaining <= 30_000, "{busy:?}");
    assert_eq!(busy.retry_delay_ms, remaining);

    let stranger = error(
        session
            .call(
                3,
                Request::Release(ReleaseRequest {
                    name: "held".into(),
                    owner_token: "0".repeat(32),
                }),
            )
            .await,
    );
    assert_eq!(code(&stranger), Code::FailedPrecondition, "{stranger:?}");
    assert_eq!(stranger.reason, "NOT_OWNER");

    let bad = error(
        session
            .acquire(4, acquire_req("no spaces", 30_000, "x", 0))
            .await,
    );
    assert_eq!(code(&bad), Code::InvalidArgument);
    assert!(bad.message.contains("name contains"), "{}", bad.message);
    assert_eq!(bad.reason, "BAD_ARGUMENT");
    assert_eq!(
        bad.metadata.get("argument").map(String::as_str),
        Some("name")
    );

    session
        .tx
        .send(SessionRequest {
            id: 5,
            timeout_ms: 0,
            request: None,
        })
        .await
        .unwrap();
    let empty = error(session.answer(5).await);
    assert_eq!(code(&empty), Code::InvalidArgument);
    assert!(empty.message.contains("empty"), "{}", empty.message);

    // A waiting Acquire as id 6; a second request as id 6 meanwhile is
    // refused, and the first goes on to its grant.
    session
        .send(
            6,
            0,
            Request::Acquire(acquire_req("held", 30_000, "w", 20_000)),
        )
        .await;
    eventually(Duration::from_secs(10), "the waiter queued", || {
        let mut client = client.clone();
        async move { described(&mut client, "held").await.waiters == 1 }
    })
    .await;
    session
        .send(6, 0, Request::Acquire(acquire_req("other", 30_000, "x", 0)))
        .await;
    let reused = error(session.answer(6).await);
    assert_eq!(code(&reused), Code::InvalidArgument);
    assert!(
        reused.message.contains("already in flight"),
        "{}",
        reused.message
    );
    assert!(!described(&mut client, "other").await.held);
    assert!(matches!(
        session.call(7, release(&lease)).await,
        Response::Release(_)
    ));
    let waited = granted(session.answer(6).await);
    assert!(waited.fence > lease.fence);
}

/// Requests run concurrently: an Acquire waiting for a held lock holds up
/// nothing behind it, and answers come in the order the work finishes.
#[tokio::test]
async fn a_waiting_acquire_holds_up_nothing_behind_it() {
    let broker = Broker::start("memory").await;
    let mut client = broker.client().await;
    let holder = common::must_acquire(&mut client, "busy", 30_000).await;
    let mut session = Session::open(&mut client).await;
    session
        .send(
            1,
            0,
            Request::Acquire(acquire_req("busy", 30_000, "w", 30_000)),
        )
        .await;
    for id in 2..12 {
        let lease = granted(
            session
                .acquire(id, acquire_req(&format!("free{id}"), 30_000, "x", 0))
                .await,
        );
        assert_eq!(lease.name, format!("free{id}"));
    }
    assert!(session.early.is_empty(), "the waiter answered early");
    client
        .release(ReleaseRequest {
            name: "busy".into(),
            owner_token: holder.owner_token,
        })
        .await
        .unwrap();
    let waited = granted(session.answer(1).await);
    assert!(waited.fence > holder.fence);
}

/// A cancelled waiting Acquire is answered CANCELLED and leaves the line at
/// once: the lock's next holder is the caller behind it.
#[tokio::test]
async fn a_cancelled_wait_leaves_the_line() {
    let broker = Broker::start("memory").await;
    let mut client = broker.client().await;
    let holder = common::must_acquire(&mut client, "line", 30_000).await;
    let mut session = Session::open(&mut client).await;
    session
        .send(
            1,
            0,
            Request::Acquire(acquire_req("line", 30_000, "first", 60_000)),
        )
        .await;
    eventually(Duration::from_secs(10), "the first waiter queued", || {
        let mut client = client.clone();
        async move { described(&mut client, "line").await.waiters == 1 }
    })
    .await;
    let mut second = client.clone();
    let behind = tokio::spawn(async move {
        second
            .acquire(acquire_req("line", 30_000, "second", 60_000))
            .await
    });
    eventually(Duration::from_secs(10), "the second waiter queued", || {
        let mut client = client.clone();
        async move { described(&mut client, "line").await.waiters == 2 }
    })
    .await;
    session
        .send(2, 0, Request::Cancel(SessionCancel { id: 1 }))
        .await;
    let cancelled = error(session.answer(1).await);
    assert_eq!(code(&cancelled), Code::Cancelled, "{cancelled:?}");
    assert_eq!(described(&mut client, "line").await.waiters, 1);
    client
        .release(ReleaseRequest {
            name: "line".into(),
            owner_token: holder.owner_token,
        })
        .await
        .unwrap();
    let next = behind.await.unwrap().expect("the second waiter's grant");
    assert!(next.into_inner().lease.unwrap().fence > holder.fence);
    // A cancel of an id not in flight is ignored: no answer, the stream goes on.
    session
        .send(3, 0, Request::Cancel(SessionCancel { id: 1 }))
        .await;
    let free = granted(
        session
            .acquire(4, acquire_req("free", 30_000, "x", 0))
            .await,
    );
    assert_eq!(free.name, "free");
    assert!(session.early.is_empty(), "{:?}", session.early);
}

/// A request's timeout_ms ends it with DEADLINE_EXCEEDED, and the waiting
/// Acquire it ended has left the line.
#[tokio::test]
async fn a_request_timeout_ends_the_wait_with_deadline_exceeded() {
    let broker = Broker::start("memory").await;
    let mut client = broker.client().await;
    common::must_acquire(&mut client, "slow", 30_000).await;
    let mut session = Session::open(&mut client).await;
    session
        .send(
            1,
            300,
            Request::Acquire(acquire_req("slow", 30_000, "w", 60_000)),
        )
        .await;
    let timed_out = error(session.answer(1).await);
    assert_eq!(code(&timed_out), Code::DeadlineExceeded, "{timed_out:?}");
    assert_eq!(timed_out.reason, "REQUEST_TIMEOUT");
    assert_eq!(timed_out.metadata["timeout_ms"], "300");
    assert!(
        timed_out.message.contains("300 ms"),
        "{}",
        timed_out.message
    );
    assert_eq!(described(&mut client, "slow").await.waiters, 0);
}

/// keep_place on the stream: the refusal carries the place in the answer
/// (the unary call's trailing metadata), and passed back it waits on in
/// the same position.
#[tokio::test]
async fn a_kept_place_comes_back_in_the_answer() {
    let broker = Broker::start("memory").await;
    let mut client = broker.client().await;
    let holder = common::must_acquire(&mut client, "kept", 30_000).await;
    let mut session = Session::open(&mut client).await;
    let refusal = error(
        session
            .acquire(
                1,
                AcquireRequest {
                    keep_place: true,
                    ..acquire_req("kept", 30_000, "w", 200)
                },
            )
            .await,
    );
    assert_eq!(code(&refusal), Code::Aborted, "{refusal:?}");
    assert_eq!(refusal.place.len(), 32, "{refusal:?}");
    assert_eq!(refusal.reason, "LOCK_HELD");
    assert!(
        refusal.metadata.contains_key("place_kept_ms"),
        "{refusal:?}"
    );
    assert!(!refusal.message.contains(&refusal.place));
    session
        .send(
            2,
            0,
            Request::Acquire(AcquireRequest {
                place: refusal.place.clone(),
                ..acquire_req("kept", 30_000, "w", 30_000)
            }),
        )
        .await;
    client
        .release(ReleaseRequest {
            name: "kept".into(),
            owner_token: holder.owner_token,
        })
        .await
        .unwrap();
    let lease = granted(session.answer(2).await);
    assert_eq!(
        lease.owner_token, refusal.place,
        "granted in its kept place"
    );
}

/// Heartbeats on the stream renew what they name; a lease granted on the
/// stream and never renewed is the stream's all the same: when the stream
/// breaks, its expiry is counted once, a little past its TTL, and not
/// before (the lease is not released early).
#[tokio::test]
async fn heartbeats_renew_and_a_broken_stream_lets_its_leases_expire_counted_once() {
    let redis = RedisServer::start();
    let broker = Broker::start(&redis.url()).await;
    let mut client = broker.client().await;
    let mut session = Session::open(&mut client).await;
    let kept = granted(session.acquire(1, acquire_req("kept", 1_000, "a", 0)).await);
    granted(
        session
            .acquire(2, acquire_req("dropped", 1_000, "a", 0))
            .await,
    );
    let streams = sample(
        &scrape(broker.metrics_addr).await,
        "leasehold_session_streams",
    );
    assert_eq!(streams, 1.0);
    // Beats every 300 ms for 2 s keep "kept" alive; "dropped" is not named.
    let mut ticks = tokio::time::interval(Duration::from_millis(300));
    for seq in 0..7 {
        ticks.tick().await;
        let beat = Request::Heartbeat(KeepAliveRequest {
            seq,
            leases: vec![LeaseRef {
                name: kept.name.clone(),
                owner_token: kept.owner_token.clone(),
                ttl_ms: 0,
                ..Default::default()
            }],
            ..Default::default()
        });
        match session.call(10 + seq, beat).await {
            Response::Heartbeat(r) => {
                assert_eq!(r.seq, seq);
                assert_eq!(r.leases[0].state(), State::Alive, "{r:?}");
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(described(&mut client, "kept").await.held);
    assert!(!described(&mut client, "dropped").await.held, "it expired");
    let lost = |text: &str| sample(text, "lease_lost_total{reason=\"expired\"}");
    // The stream breaks (the client resets it): "kept" is not released
    // early, and runs out its TTL; both expiries are counted, once each.
    let before = lost(&scrape(broker.metrics_addr).await);
    drop(session);
    assert!(described(&mut client, "kept").await.held, "released early");
    let metrics = broker.metrics_addr;
    eventually(
        Duration::from_secs(15),
        "both expiries counted",
        || async move { lost(&scrape(metrics).await) - before >= 2.0 },
    )
    .await;
    let text = scrape(metrics).await;
    assert_eq!(lost(&text) - before, 2.0, "counted once each");
    assert_eq!(sample(&text, "leasehold_session_streams"), 0.0);
    assert!(!described(&mut client, "kept").await.held);
}

/// A stream that breaks while an Acquire waits on it gives up the place,
/// and the lock goes to the caller behind, not to a client that left.
#[tokio::test]
async fn a_broken_stream_gives_up_its_waits() {
    let broker = Broker::start("memory").await;
    let mut client = broker.client().await;
    let holder = common::must_acquire(&mut client, "gone", 30_000).await;
    let session = Session::open(&mut client).await;
    session
        .send(
            1,
            0,
            Request::Acquire(acquire_req("gone", 30_000, "w", 60_000)),
        )
        .await;
    eventually(Duration::from_secs(10), "the waiter queued", || {
        let mut client = client.clone();
        async move { described(&mut client, "gone").await.waiters == 1 }
    })
    .await;
    drop(session);
    eventually(Duration::from_secs(10), "the waiter left the line", || {
        let mut client = client.clone();
        async move { described(&mut client, "gone").await.waiters == 0 }
    })
    .await;
    client
        .release(ReleaseRequest {
            name: "gone".into(),
            owner_token: holder.owner_token,
        })
        .await
        .unwrap();
    assert!(!described(&mut client, "gone").await.held);
}

/// A client that half-closes has its requests in flight answered, then the
/// stream ends with OK.
#[tokio::test]
async fn a_half_close_answers_what_is_in_flight_then_ends() {
    let broker = Broker::start("memory").await;
    let mut client = broker.client().await;
    let holder = common::must_acquire(&mut client, "late", 30_000).await;
    let session = Session::open(&mut client).await;
    session
        .send(
            1,
            0,
            Request::Acquire(acquire_req("late", 30_000, "w", 30_000)),
        )
        .await;
    eventually(Duration::from_secs(10), "the waiter queued", || {
        let mut client = client.clone();
        async move { described(&mut client, "late").await.waiters == 1 }
    })
    .await;
    let Session { tx, mut rx, .. } = session;
    drop(tx);
    client
        .release(ReleaseRequest {
            name: "late".into(),
            owner_token: holder.owner_token,
        })
        .await
        .unwrap();
    let answer = rx.message().await.expect("the answer").expect("one");
    assert_eq!(answer.id, 1);
    assert!(matches!(answer.response, Some(Response::Acquire(_))));
    assert!(rx.message().await.expect("an OK end").is_none());
}

/// A graceful shutdown answers the waits it ends (UNAVAILABLE, with the
/// place of one that kept it), then ends the stream with UNAVAILABLE.
#[tokio::test]
async fn a_shutdown_answers_the_waits_then_ends_the_stream() {
    let broker = Broker::start("memory").await;
    let mut client = broker.client().await;
    common::must_acquire(&mut client, "stop", 30_000).await;
    let mut session = Session::open(&mut client).await;
    session
        .send(
            1,
            0,
            Request::Acquire(AcquireRequest {
                keep_place: true,
                ..acquire_req("stop", 30_000, "w", 60_000)
            }),
        )
        .await;
    eventually(Duration::from_secs(10), "the waiter queued", || {
        let mut client = client.clone();
        async move { described(&mut client, "stop").await.waiters == 1 }
    })
    .await;
    let stopping = tokio::spawn(broker.stop());
    let ended = error(session.answer(1).await);
    assert_eq!(code(&ended), Code::Unavailable, "{ended:?}");
    assert!(ended.message.contains("shutting down"), "{}", ended.message);
    assert_eq!(ended.place.len(), 32, "the kept place: {ended:?}");
    let end = session.rx.message().await.expect_err("the stream's end");
    assert_eq!(end.code(), Code::Unavailable, "{end:?}");
    stopping.await.unwrap().unwrap();
}

/// `--max-stream-leases` bounds what one stream tracks, not what it may
/// hold: past it an Acquire is still granted. When the stream breaks, the
/// tracked leases' expiries are counted a moment past their TTL; the
/// untracked one's when its name is granted again (as for a lease taken
/// with a unary call), each once.
#[tokio::test]
async fn a_stream_tracks_at_most_max_stream_leases_and_holds_more() {
    let redis = RedisServer::start();
    let broker = Broker::start_with(&redis.url(), |c| c.limits.max_stream_leases = 2).await;
    let mut client = broker.client().await;
    let mut session = Session::open(&mut client).await;
    for id in 0..3 {
        granted(
            session
                .acquire(id, acquire_req(&format!("n{id}"), 1_000, "x", 0))
                .await,
        );
    }
    let lost = |text: &str, reason: &str| {
        sample(text, &format!("lease_lost_total{{reason=\"{reason}\"}}"))
    };
    let before = scrape(broker.metrics_addr).await;
    drop(session);
    let metrics = broker.metrics_addr;
    let expired_before = lost(&before, "expired");
    eventually(
        Duration::from_secs(15),
        "the tracked expiries counted",
        || async move { lost(&scrape(metrics).await, "expired") - expired_before >= 2.0 },
    )
    .await;
    // Each name's grant reports the expiry nobody counted yet: only n2's.
    for name in ["n0", "n1", "n2"] {
        common::must_acquire(&mut client, name, 30_000).await;
    }
    let after = scrape(metrics).await;
    assert_eq!(lost(&after, "expired") - expired_before, 2.0);
    assert_eq!(
        lost(&after, "not_owner") - lost(&before, "not_owner"),
        1.0,
        "the untracked lease's expiry, reported by its name's next grant"
    );
}

/// At its cap (`--max-concurrent-streams` requests in flight) a stream
/// starts nothing more, but a cancel still gets through and makes room for
/// the request behind it.
#[tokio::test]
async fn at_the_cap_a_cancel_makes_room() {
    let broker = Broker::start_with("memory", |c| c.max_concurrent_streams = 4).await;
    let mut client = broker.client().await;
    common::must_acquire(&mut client, "busy", 60_000).await;
    common::must_acquire(&mut client, "other", 60_000).await;
    let mut session = Session::open(&mut client).await;
    for id in 1..=4 {
        session
            .send(
                id,
                0,
                Request::Acquire(acquire_req("busy", 30_000, "w", 60_000)),
            )
            .await;
    }
    session
        .send(
            5,
            0,
            Request::Acquire(acquire_req("other", 30_000, "w", 60_000)),
        )
        .await;
    let waiting = |client: &LeaseholdServiceClient<Channel>| {
        let mut client = client.clone();
        async move {
            let (busy, other) = (
                described(&mut client, "busy").await.waiters,
                described(&mut client, "other").await.waiters,
            );
            assert!(
                busy + other <= 4,
                "{busy} + {other} waits on a stream capped at 4"
            );
            (busy, other)
        }
    };
    eventually(Duration::from_secs(10), "four waits", || async {
        waiting(&client).await == (4, 0)
    })
    .await;
    session
        .send(6, 0, Request::Cancel(SessionCancel { id: 1 }))
        .await;
    assert_eq!(code(&error(session.answer(1).await)), Code::Cancelled);
    eventually(
        Duration::from_secs(10),
        "the parked wait started",
        || async { waiting(&client).await == (3, 1) },
    )
    .await;
}

/// Waits that fill the stream's cap do not hold up its heartbeats: the
/// leases of a client waiting for many locks are still renewed.
#[tokio::test]
async fn waits_at_the_cap_do_not_starve_the_heartbeats() {
    let broker = Broker::start_with("memory", |c| c.max_concurrent_streams = 2).await;
    let mut client = broker.client().await;
    common::must_acquire(&mut client, "busy", 60_000).await;
    let mut session = Session::open(&mut broker.client().await).await;
    let kept = granted(session.acquire(1, acquire_req("kept", 1_000, "a", 0)).await);
    for id in 2..=3 {
        session
            .send(
                id,
                0,
                Request::Acquire(acquire_req("busy", 30_000, "w", 60_000)),
            )
            .await;
    }
    eventually(Duration::from_secs(10), "two waits", || {
        let mut client = client.clone();
        async move { described(&mut client, "busy").await.waiters == 2 }
    })
    .await;
    let beat = Request::Heartbeat(KeepAliveRequest {
        seq: 1,
        leases: vec![LeaseRef {
            name: kept.name.clone(),
            owner_token: kept.owner_token.clone(),
            ttl_ms: 0,
            ..Default::default()
        }],
        ..Default::default()
    });
    match session.call(4, beat).await {
        Response::Heartbeat(r) => assert_eq!(r.leases[0].state(), State::Alive, "{r:?}"),
        other => panic!("{other:?}"),
    }
}

/// A request parked behind the cap can be cancelled before it ever runs:
/// it is answered CANCELLED and never reaches the lock.
#[tokio::test]
async fn a_parked_request_can_be_cancelled_before_it_runs() {
    let broker = Broker::start_with("memory", |c| c.max_concurrent_streams = 1).await;
    let mut client = broker.client().await;
    common::must_acquire(&mut client, "busy", 60_000).await;
    common::must_acquire(&mut client, "other", 60_000).await;
    let mut session = Session::open(&mut broker.client().await).await;
    session
        .send(
            1,
            0,
            Request::Acquire(acquire_req("busy", 30_000, "w", 60_000)),
        )
        .await;
    eventually(Duration::from_secs(10), "the first wait", || {
        let mut client = client.clone();
        async move { described(&mut client, "busy").await.waiters == 1 }
    })
    .await;
    session
        .send(
            2,
            0,
            Request::Acquire(acquire_req("other", 30_000, "w", 60_000)),
        )
        .await;
    session
        .send(3, 0, Request::Cancel(SessionCancel { id: 2 }))
        .await;
    assert_eq!(code(&error(session.answer(2).await)), Code::Cancelled);
    session
        .send(4, 0, Request::Cancel(SessionCancel { id: 1 }))
        .await;
    assert_eq!(code(&error(session.answer(1).await)), Code::Cancelled);
    // The parked request never ran: nobody ever waited for "other".
    let d = described(&mut client, "other").await;
    assert_eq!((d.waiters, d.local_waiters), (0, 0));
    assert_eq!(described(&mut client, "busy").await.waiters, 0);
}

/// Heartbeats on a Session stream are paced by `--max-stream-rate`, as on
/// KeepAlive, not refused by the request-rate caps: a connection capped at
/// 2 requests a second still keeps its leases alive.
#[tokio::test]
async fn heartbeats_are_paced_not_refused_by_the_rate_caps() {
    let broker = Broker::start_with("memory", |c| c.limits.conn_max_rate = 2).await;
    let mut client = broker.client().await;
    let mut session = Session::open(&mut client).await;
    let lease = granted(
        session
            .acquire(1, acquire_req("paced", 1_000, "a", 0))
            .await,
    );
    for seq in 0..6 {
        let beat = Request::Heartbeat(KeepAliveRequest {
            seq,
            leases: vec![LeaseRef {
                name: lease.name.clone(),
                owner_token: lease.owner_token.clone(),
                ttl_ms: 0,
                ..Default::default()
            }],
            ..Default::default()
        });
        match session.call(10 + seq, beat).await {
            Response::Heartbeat(r) => assert_eq!(r.leases[0].state(), State::Alive, "{r:?}"),
            other => panic!("heartbeat {seq}: {other:?}"),
        }
    }
    // The other requests are capped as unary calls are.
    let mut refused = None;
    for id in 20..30 {
        let name = format!("other{id}");
        if let Response::Error(e) = session.acquire(id, acquire_req(&name, 1_000, "a", 0)).await {
            refused = Some(e);
            break;
        }
    }
    let refused = refused.expect("a request over the rate cap refused");
    assert_eq!(code(&refused), Code::ResourceExhausted, "{refused:?}");
    assert!(
        refused.message.contains("--conn-max-rate"),
        "{}",
        refused.message
    );
}
