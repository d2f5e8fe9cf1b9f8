//! The TTL advisor: a stream whose heartbeats take longer than a tenth of a
//! lease's TTL (p99 of its round trips) is told so in the answers, logged
//! once, and counted; a stream with the same TTL and a fast network is not.
//! And `ttl_auto`, whose TTL follows the latency of its own stream.
//!
//! The slow network is real: a TCP proxy on loopback that holds every chunk
//! for a while in each direction (`proxy::Proxy::set_latency`).

use leasehold_testkit as common;

use std::time::Duration;

use common::{keepalive::Stream, must_acquire, proxy::Proxy, sample, scrape, BrokerProcess};
use leasehold_client::{AcquireOptions, Client};
use leasehold_server::proto::{
    lease_status::State, leasehold_service_client::LeaseholdServiceClient, KeepAliveResponse,
    LeaseRef,
};
use serde_json::Value;
use tonic::transport::Channel;

/// A log file of this test's own.
fn log_path(what: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!(
        "leasehold-advice-{what}-{}-{}.log",
        std::process::id(),
        common::free_port()
    ))
}

/// A client whose connection runs through `proxy`.
async fn client_via(proxy: &Proxy) -> LeaseholdServiceClient<Channel> {
    let channel = Channel::from_shared(format!("http://{}", proxy.addr()))
        .expect("a URL")
        .connect()
        .await
        .expect("connect through the proxy");
    LeaseholdServiceClient::new(channel)
}

/// `beats` heartbeats on `stream` renewing `lease` (each reporting the
/// round trip of the one before, as the clients do), one after the other's
/// answer: the answers, and the round trips measured.
async fn beat(
    stream: &mut Stream,
    lease: &LeaseRef,
    beats: usize,
) -> (Vec<KeepAliveResponse>, Vec<Duration>) {
    let (mut answers, mut trips) = (Vec::new(), Vec::new());
    let mut last = Duration::ZERO;
    for _ in 0..beats {
        let (answer, trip) = stream
            .beat_reporting(vec![lease.clone()], last)
            .await
            .expect("a heartbeat answered");
        assert_eq!(answer.leases[0].state(), State::Alive, "{answer:?}");
        answers.push(answer);
        trips.push(trip);
        last = trip;
    }
    (answers, trips)
}

/// The JSON log lines of `log` that carry the advisor's warning.
fn advisor_warnings(log: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|event| {
            event["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("TTL too short"))
        })
        .collect()
}

/// Two streams renew a 5 s lease each, heartbeat after heartbeat; one runs
/// through a proxy that holds each direction 500 ms (a round trip of a
/// second or more: 10x that is twice the TTL). Exactly that stream's
/// answers carry advice, from its third measured round trip on; the broker
/// logs it once, and counts exactly the heartbeats it advised.
#[tokio::test]
async fn the_advisor_warns_exactly_the_slow_stream() {
    let log = log_path("warn");
    let broker = BrokerProcess::start_logged("memory", &["--log-format", "json"], Some(&log)).await;
    let mut direct = broker.client().await;
    let proxy = Proxy::start(broker.addr).await;
    let mut slow_client = client_via(&proxy).await;
    proxy.set_latency(Duration::from_millis(500));

    let fast_lease = must_acquire(&mut direct, "advice/fast", 5_000).await;
    let slow_lease = must_acquire(&mut direct, "advice/slow", 5_000).await;
    let lease_ref = |lease: &leasehold_server::proto::Lease| LeaseRef {
        name: lease.name.clone(),
        owner_token: lease.owner_token.clone(),
        ..Default::default()
    };
    let mut fast = Stream::open(&mut direct).await;
    let mut slow = Stream::open(&mut slow_client).await;
    const BEATS: usize = 6;
    let (fast_ref, slow_ref) = (lease_ref(&fast_lease), lease_ref(&slow_lease));
    let ((fast_answers, fast_trips), (slow_answers, slow_trips)) = tokio::join!(
        beat(&mut fast, &fast_ref, BEATS),
        beat(&mut slow, &slow_ref, BEATS),
    );

    // The fast stream: never advised (its round trips are far under the
    // 500 ms that would make 5 s short).
    assert!(
        fast_trips.iter().all(|t| *t < Duration::from_millis(500)),
        "the direct stream was slow on this machine: {fast_trips:?}"
    );
    assert!(
        fast_answers.iter().all(|a| a.advice.is_none()),
        "{fast_answers:#?}"
    );

    // The slow stream: the first heartbeat reports nothing (the broker
    // counts the store's time), the next two report a second or more: from
    // the third answer on, 3 samples, advised.
    assert!(
        slow_trips
            .iter()
            .all(|t| *t >= Duration::from_millis(1_000)),
        "{slow_trips:?}"
    );
    let advised: Vec<_> = slow_answers.iter().map(|a| a.advice.is_some()).collect();
    assert_eq!(
        advised,
        [false, false, true, true, true, true],
        "{slow_answers:#?}"
    );
    let last = slow_answers.last().unwrap().advice.clone().unwrap();
    let p99 = Duration::from_micros(last.round_trip_p99_us);
    let largest_reported = slow_trips[..BEATS - 1].iter().max().unwrap();
    assert_eq!(
        p99.as_millis(),
        largest_reported.as_millis(),
        "of 6 samples the p99 is the largest: {last:?}"
    );
    assert_eq!(last.shortest_ttl_ms, 5_000);
    assert_eq!(last.leases_below, 1);
    assert_eq!(
        Duration::from_millis(last.suggested_ttl_ms),
        Duration::from_millis(u64::try_from((p99 * 10).as_nanos().div_ceil(1_000_000)).unwrap()),
        "10 times the p99 (above the 10 s floor here): {last:?}"
    );
    assert!(last.message.contains("ttl_auto"), "{}", last.message);

    // Counted once per advised heartbeat, by tenant; logged once per stream.
    let advised = advised.iter().filter(|a| **a).count();
    let scraped = scrape(broker.metrics_addr).await;
    assert_eq!(
        sample(&scraped, r#"leasehold_ttl_advice_total{tenant="@root"}"#),
        advised as f64,
        "{scraped}"
    );
    let warnings = advisor_warnings(&log);
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert_eq!(warnings[0]["level"], "WARN");
    assert_eq!(warnings[0]["fields"]["tenant"], "@root");
    assert_eq!(warnings[0]["fields"]["shortest_ttl_ms"], 5_000);
    let logged = serde_json::to_string(&warnings[0]).unwrap();
    assert!(
        !logged.contains(&slow_lease.owner_token) && !logged.contains("advice/slow"),
        "the advice names no lease, let alone its token: {logged}"
    );

    // A second slow stream is a stream of its own: logged once more.
    let mut again = Stream::open(&mut slow_client).await;
    let (answers, _) = beat(&mut again, &slow_ref, 3).await;
    assert!(answers[2].advice.is_some(), "{answers:#?}");
    assert_eq!(advisor_warnings(&log).len(), 2);
}

/// `ttl_auto` through the Rust client: on a fast connection the lease
/// gets the floor (2 s here) and keeps it; through the slow proxy (a round
/// trip of 500 ms or more) the lease's TTL grows, at a heartbeat, to 10
/// times the measured p99, and the client is never told its TTL is short.
/// A TTL given with ttl_auto is refused in the caller's words.
#[tokio::test]
async fn ttl_auto_follows_the_latency_of_its_stream() {
    let broker = BrokerProcess::start_logged(
        "memory",
        &["--ttl-auto-floor", "2s", "--ttl-min", "100ms"],
        None,
    )
    .await;
    let proxy = Proxy::start(broker.addr).await;
    let fast = Client::connect(broker.url()).await.unwrap();
    let slow = Client::connect(format!("http://{}", proxy.addr()))
        .await
        .unwrap();

    let fast_lease = fast
        .acquire("auto/fast", AcquireOptions::new().ttl_auto())
        .await
        .unwrap();
    assert_eq!(fast_lease.ttl(), Duration::from_secs(2), "the floor");
    proxy.set_latency(Duration::from_millis(250));
    let slow_lease = slow
        .acquire("auto/slow", AcquireOptions::new().ttl_auto())
        .await
        .unwrap();
    // Granted before its stream measured anything: fitted to the tenant's
    // streams (the fast one's), the floor.
    assert_eq!(slow_lease.ttl(), Duration::from_secs(2));

    // Each renewal moves the deadline: wait for renewals until the TTL
    // grew (three measured round trips, a heartbeat every third of a TTL).
    let mut seen = slow_lease.deadline();
    for _ in 0..20 {
        if slow_lease.ttl() >= Duration::from_secs(5) {
            break;
        }
        seen = tokio::time::timeout(Duration::from_secs(10), slow_lease.deadline_after(seen))
            .await
            .expect("a renewal of the slow lease");
    }
    let grown = slow_lease.ttl();
    assert!(
        grown >= Duration::from_secs(5) && grown <= Duration::from_secs(60),
        "10 times a round trip of 500 ms or more: {grown:?}"
    );
    assert!(!slow_lease.is_lost());
    assert_eq!(
        slow.ttl_advice(),
        None,
        "an auto lease is renewed at 10x the p99 and is not short"
    );
    // The fast lease kept the floor all along.
    assert_eq!(fast_lease.ttl(), Duration::from_secs(2));
    assert!(!fast_lease.is_lost());
    assert_eq!(fast.ttl_advice(), None);

    // Both ttl_ms and ttl_auto: refused, naming both.
    let mut raw = broker.client().await;
    let refused = raw
        .acquire(leasehold_server::proto::AcquireRequest {
            name: "auto/both".into(),
            ttl_ms: 5_000,
            ttl_auto: true,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(
        refused.message().contains("ttl_ms") && refused.message().contains("ttl_auto"),
        "{}",
        refused.message()
    );
    slow_lease.release().await.unwrap();
    fast_lease.release().await.unwrap();
}

/// The Rust client surfaces the advice: a 2 s lease held through a proxy
/// holding each direction 300 ms (a round trip of 600 ms or more, 10x over
/// the TTL) makes `ttl_advice` say so, with the suggestion; a client
/// holding the same TTL directly is never advised.
#[tokio::test]
async fn the_rust_client_surfaces_the_advice() {
    let broker = BrokerProcess::start_logged("memory", &[], None).await;
    let proxy = Proxy::start(broker.addr).await;
    let fast = Client::connect(broker.url()).await.unwrap();
    let slow = Client::connect(format!("http://{}", proxy.addr()))
        .await
        .unwrap();
    let opts = || AcquireOptions::new().ttl(Duration::from_secs(2));
    let fast_lease = fast.acquire("surfaced/fast", opts()).await.unwrap();
    let slow_lease = slow.acquire("surfaced/slow", opts()).await.unwrap();
    proxy.set_latency(Duration::from_millis(300));

    let mut changes = slow.ttl_advice_changes();
    let advice = tokio::time::timeout(Duration::from_secs(30), changes.wait_for(Option::is_some))
        .await
        .expect("advice within a few heartbeats")
        .unwrap()
        .clone()
        .unwrap();
    assert_eq!(advice.shortest_ttl, Duration::from_secs(2));
    assert!(
        advice.round_trip_p99 >= Duration::from_millis(600),
        "{advice:?}"
    );
    assert!(advice.suggested_ttl >= Duration::from_secs(6), "{advice:?}");
    assert_eq!(advice.leases_below, 1);
    assert_eq!(fast.ttl_advice(), None);
    assert!(!fast_lease.is_lost());
    drop(slow_lease);
    fast_lease.release().await.unwrap();
}

/// A client that reports absurd round trips (an hour and more, or every
/// bit set) misleads its own advice only: the report counts as an hour,
/// the suggestion is the broker's longest TTL and says even that is short,
/// the lease is renewed as usual, and another stream of the same tenant is
/// not advised.
#[tokio::test]
async fn an_absurd_report_is_capped_and_misleads_only_its_own_stream() {
    let broker = BrokerProcess::start_logged("memory", &[], None).await;
    let mut client = broker.client().await;
    let lease = must_acquire(&mut client, "advice/absurd", 5_000).await;
    let other = must_acquire(&mut client, "advice/sane", 5_000).await;
    let lease_ref = |lease: &leasehold_server::proto::Lease| LeaseRef {
        name: lease.name.clone(),
        owner_token: lease.owner_token.clone(),
        ..Default::default()
    };
    let mut liar = Stream::open(&mut client).await;
    let mut answers = Vec::new();
    for report in [u64::MAX, u64::MAX, 7_200_000_000, u64::MAX] {
        let (answer, _) = liar
            .beat_reporting(vec![lease_ref(&lease)], Duration::from_micros(report))
            .await
            .unwrap();
        assert_eq!(answer.leases[0].state(), State::Alive, "{answer:?}");
        answers.push(answer);
    }
    let advice = answers[3].advice.clone().expect("advised");
    assert_eq!(advice.round_trip_p99_us, 3_600_000_000, "capped at an hour");
    assert_eq!(advice.suggested_ttl_ms, 3_600_000, "the broker's --ttl-max");
    assert!(
        advice.message.contains("even the broker's longest TTL"),
        "{}",
        advice.message
    );

    let mut honest = Stream::open(&mut client).await;
    let (answers, _) = beat(&mut honest, &lease_ref(&other), 4).await;
    assert!(answers.iter().all(|a| a.advice.is_none()), "{answers:#?}");
}

/// A `ttl_auto` lease whose TTL shrinks: granted on a fresh stream, it is
/// fitted to its tenant's round trips, which a slow stream of the same
/// tenant makes long (10 s and more); from its own stream's third round
/// trip (fast) it is renewed for the floor, 2 s. The store then expires it
/// 2 s after each renewal, so the client's deadline must come back with
/// it (never past `now + 2 s`), and its heartbeats come within a third of
/// 2 s, or the lease is lost. Before this was handled, the deadline stayed
/// where the 10 s TTL had put it, and the next heartbeat came 3 s later.
#[tokio::test]
async fn a_shrinking_ttl_auto_lease_brings_its_deadline_back_and_beats_faster() {
    let broker = BrokerProcess::start_logged(
        "memory",
        &["--ttl-auto-floor", "2s", "--ttl-min", "100ms"],
        None,
    )
    .await;
    // The slow stream: three round trips of a second or more make the
    // tenant's p99.
    let proxy = Proxy::start(broker.addr).await;
    let mut slow_client = client_via(&proxy).await;
    let mut direct = broker.client().await;
    let slow_lease = must_acquire(&mut direct, "shrink/slow", 30_000).await;
    proxy.set_latency(Duration::from_millis(500));
    let mut slow = Stream::open(&mut slow_client).await;
    let slow_ref = LeaseRef {
        name: slow_lease.name.clone(),
        owner_token: slow_lease.owner_token.clone(),
        ..Default::default()
    };
    beat(&mut slow, &slow_ref, 4).await;

    let client = Client::connect(broker.url()).await.unwrap();
    let lease = client
        .acquire("shrink/fast", AcquireOptions::new().ttl_auto())
        .await
        .unwrap();
    let granted = lease.ttl();
    assert!(
        granted >= Duration::from_secs(10),
        "fitted to the tenant's slow p99: {granted:?}"
    );

    // Renewals until the TTL is the floor (the stream's own third round
    // trip), each awaited as a move of the deadline.
    let mut deadlines = lease.deadline_changes();
    tokio::time::timeout(Duration::from_secs(30), async {
        while lease.ttl() != Duration::from_secs(2) {
            deadlines.changed().await.unwrap();
        }
    })
    .await
    .expect("the TTL shrinks to the floor within a few heartbeats");
    let left = lease
        .deadline()
        .saturating_duration_since(tokio::time::Instant::now());
    assert!(
        left <= Duration::from_secs(2),
        "the deadline came back with the TTL: {left:?} left"
    );

    // Six renewals at the new TTL (about 2 s of heartbeats a third of it
    // apart); the lease lives on, at its fence, with a 2 s TTL in the store.
    for _ in 0..6 {
        tokio::time::timeout(Duration::from_secs(2), deadlines.changed())
            .await
            .expect("a renewal within the new TTL")
            .unwrap();
    }
    assert!(!lease.is_lost());
    let described = client.describe("shrink/fast").await.unwrap();
    assert!(described.held);
    assert_eq!(described.fence, lease.fence());
    assert_eq!(described.ttl, Duration::from_secs(2));
    lease.release().await.unwrap();
}
