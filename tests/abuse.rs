//! Hostile input: garbage on the gRPC port, stalled half-open HTTP/2
//! connections, a heartbeat naming 100,000 leases, random bytes as names and
//! tokens. The broker answers with a clear status or closes the connection,
//! never panics, and a bystander's lease is untouched.

use leasehold_testkit as common;

use std::time::{Duration, Instant};

use common::{acquire_req, eventually, must_acquire, Broker, BrokerProcess, RedisServer};
use leasehold_server::proto::{
    leasehold_service_client::LeaseholdServiceClient, DescribeRequest, KeepAliveRequest, LeaseRef,
    RenewRequest,
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};
use tonic::transport::Channel;

/// The bystander's lease is still there, with its fence, and renewable.
async fn bystander_intact(client: &mut LeaseholdServiceClient<Channel>, fence: u64, token: &str) {
    let d = client
        .describe(DescribeRequest {
            name: "bystander".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(d.held && d.fence == fence, "{d:?}");
    client
        .renew(RenewRequest {
            name: "bystander".into(),
            owner_token: token.into(),
            ttl_ms: 0,
            ..Default::default()
        })
        .await
        .expect("the bystander still owns its lease");
}

fn random_bytes(n: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; n];
    getrandom::fill(&mut bytes).unwrap();
    bytes
}

/// Random bytes instead of HTTP/2: the broker closes the connection and
/// goes on serving.
#[tokio::test]
async fn garbage_on_the_grpc_port_is_refused() {
    let redis = RedisServer::start();
    let broker = Broker::start(&redis.url()).await;
    let mut client = broker.client().await;
    let lease = must_acquire(&mut client, "bystander", 60_000).await;
    for size in [1, 24, 100, 4_096, 65_536] {
        let mut garbage = random_bytes(size);
        // Not the start of the HTTP/2 preface ("PRI * HTTP/2.0..."): one
        // 'P' (1 in 256 of the 1-byte runs) is a slow client, not garbage,
        // and waits for the handshake timeout (tested in tests/caps.rs).
        if garbage[0] == b'P' {
            garbage[0] = b'Q';
        }
        let mut stream = TcpStream::connect(broker.addr).await.unwrap();
        let _ = stream.write_all(&garbage).await;
        let mut sink = Vec::new();
        let closed =
            tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut sink)).await;
        assert!(
            closed.is_ok(),
            "a connection sending {size} garbage bytes was kept open"
        );
    }
    bystander_intact(&mut client, lease.fence, &lease.owner_token).await;
}

/// 200 connections that send half an HTTP/2 preface and stall do not keep
/// the broker from serving others promptly.
#[tokio::test]
async fn stalled_connections_do_not_starve_others() {
    let broker = Broker::start("memory").await;
    let mut client = broker.client().await;
    let lease = must_acquire(&mut client, "bystander", 60_000).await;
    let mut stalled = Vec::new();
    for _ in 0..200 {
        let mut stream = TcpStream::connect(broker.addr).await.unwrap();
        stream.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
        stalled.push(stream);
    }
    let started = Instant::now();
    let mut fresh = broker.client().await;
    must_acquire(&mut fresh, "still-served", 10_000).await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "served after {:?}",
        started.elapsed()
    );
    bystander_intact(&mut client, lease.fence, &lease.owner_token).await;
    drop(stalled);
}

/// A heartbeat naming 100,000 leases ends its stream with a clear status
/// (over the lease limit, or over the message size limit), nothing else.
#[tokio::test]
async fn a_heartbeat_naming_100k_leases_is_refused() {
    let redis = RedisServer::start();
    let broker = Broker::start(&redis.url()).await;
    let mut client = broker.client().await;
    let lease = must_acquire(&mut client, "bystander", 60_000).await;
    let leases: Vec<LeaseRef> = (0..100_000)
        .map(|i| LeaseRef {
            name: format!("flood-{i}"),
            owner_token: "0123456789abcdef0123456789abcdef".into(),
            ttl_ms: 0,
            ..Default::default()
        })
        .collect();
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tx.send(KeepAliveRequest {
        seq: 1,
        leases,
        ..Default::default()
    })
    .await
    .unwrap();
    let outcome = match client
        .keep_alive(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
    {
        Ok(response) => response.into_inner().message().await.map(|_| ()),
        Err(status) => Err(status),
    };
    let status = outcome.expect_err("100,000 leases in one heartbeat were accepted");
    assert!(
        matches!(
            status.code(),
            tonic::Code::ResourceExhausted | tonic::Code::OutOfRange
        ),
        "{status:?}"
    );
    bystander_intact(&mut client, lease.fence, &lease.owner_token).await;
}

/// The code of a call's outcome (`Ok` for a success), checked against the
/// codes that call may give; a refusal must say why.
fn outcome<T>(
    call: &str,
    result: Result<T, tonic::Status>,
    allowed: &[tonic::Code],
) -> tonic::Code {
    let code = result
        .as_ref()
        .map_or_else(tonic::Status::code, |_| tonic::Code::Ok);
    assert!(
        allowed.contains(&code),
        "{call}: {result:?}",
        result = result.err()
    );
    if let Err(status) = &result {
        assert!(
            !status.message().is_empty(),
            "{call}: {status:?} says nothing"
        );
    }
    code
}

/// Random bytes as names, holders and tokens: each call gets a status from
/// the set that call may give, with a message (never a dropped connection,
/// an INTERNAL or a panic), and nothing else changes.
#[tokio::test]
async fn random_requests_get_statuses() {
    use tonic::Code::{Aborted, FailedPrecondition, InvalidArgument, NotFound, Ok};
    let broker = Broker::start("memory").await;
    let mut client = broker.client().await;
    let lease = must_acquire(&mut client, "bystander", 60_000).await;
    let mut seen = std::collections::BTreeMap::<(&str, i32), usize>::new();
    // Names, tokens and holders drawn in part from their own alphabets (so
    // they may be valid, and the calls get past validation), else raw bytes.
    let drawn = |len: usize, alphabet: &[u8]| -> String {
        random_bytes(len)
            .iter()
            .map(|b| char::from(alphabet[usize::from(*b) % alphabet.len()]))
            .collect()
    };
    for round in 0..300 {
        let name = if round % 2 == 0 {
            drawn(round % 300, b"abcdefghijklmnopqrstuvwxyz0123456789._:/-")
        } else {
            String::from_utf8_lossy(&random_bytes(round % 300)).into_owned()
        };
        let token = if round % 3 == 0 {
            drawn(32, b"0123456789abcdef")
        } else {
            String::from_utf8_lossy(&random_bytes(round % 40)).into_owned()
        };
        let holder = if round % 4 == 0 {
            drawn(round % 270, b"abcdefghijklmnopqrstuvwxyz0123456789 -_.@")
        } else {
            String::from_utf8_lossy(&random_bytes(round % 270)).into_owned()
        };
        // Every third TTL within the broker's range (0: the default).
        let ttl_ms = if round % 3 == 1 {
            [0, 500, 10_000, 3_600_000][round % 4]
        } else {
            u64::from_le_bytes(random_bytes(8).try_into().unwrap()) >> (round % 64)
        };
        let acquired = client.acquire(acquire_req(&name, ttl_ms, &holder, 0)).await;
        // A random name may be valid, and free: granted.
        let code = outcome("acquire", acquired, &[Ok, InvalidArgument, Aborted]);
        *seen.entry(("acquire", code as i32)).or_default() += 1;
        let renewed = client
            .renew(RenewRequest {
                name: name.clone(),
                owner_token: token.clone(),
                ttl_ms,
                ..Default::default()
            })
            .await;
        let code = outcome(
            "renew",
            renewed,
            &[InvalidArgument, NotFound, FailedPrecondition],
        );
        *seen.entry(("renew", code as i32)).or_default() += 1;
        let released = client
            .release(leasehold_server::proto::ReleaseRequest {
                name: "bystander".into(),
                owner_token: token,
            })
            .await;
        let code = outcome("release", released, &[InvalidArgument, FailedPrecondition]);
        *seen.entry(("release", code as i32)).or_default() += 1;
        let described = client
            .describe(DescribeRequest {
                name,
                ..Default::default()
            })
            .await;
        let code = outcome("describe", described, &[Ok, InvalidArgument]);
        *seen.entry(("describe", code as i32)).or_default() += 1;
    }
    // Both sides of validation were exercised.
    for call in ["acquire", "describe"] {
        assert!(seen.get(&(call, Ok as i32)) > Some(&0), "{seen:?}");
        assert!(
            seen.get(&(call, InvalidArgument as i32)) > Some(&0),
            "{seen:?}"
        );
    }
    assert!(
        seen.get(&("release", FailedPrecondition as i32)) > Some(&0),
        "{seen:?}"
    );
    assert!(seen.get(&("renew", NotFound as i32)) > Some(&0), "{seen:?}");
    bystander_intact(&mut client, lease.fence, &lease.owner_token).await;
}

/// A raw HTTP/2 connection to the broker, to send what no gRPC client
/// would: messages announced and left unfinished.
mod raw {
    use std::{convert::Infallible, net::SocketAddr};

    use http_body_util::StreamBody;
    use hyper::body::{Bytes, Frame};
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use tokio::sync::mpsc;
    use tokio_stream::wrappers::ReceiverStream;

    pub type Body = StreamBody<ReceiverStream<Result<Frame<Bytes>, Infallible>>>;
    /// What feeds a body: keep it to keep the body open.
    pub type Feed = mpsc::Sender<Result<Frame<Bytes>, Infallible>>;

    pub async fn connect(addr: SocketAddr) -> hyper::client::conn::http2::SendRequest<Body> {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (sender, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
                .await
                .unwrap();
        tokio::spawn(conn);
        sender
    }

    /// Starts an Acquire whose one message announces `len` bytes, sends
    /// `sent` of them and keeps the body open (the sender). Resolves to the
    /// grpc-status once the broker answers.
    pub fn unfinished_acquire(
        sender: &mut hyper::client::conn::http2::SendRequest<Body>,
        token: Option<&str>,
        len: usize,
        sent: usize,
    ) -> (Feed, tokio::task::JoinHandle<Option<i32>>) {
        let (tx, rx) = mpsc::channel(4);
        let mut request = hyper::Request::post("/leasehold.v1.LeaseholdService/Acquire")
            .header("content-type", "application/grpc")
            .header("te", "trailers");
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        let request = request
            .body(StreamBody::new(ReceiverStream::new(rx)))
            .unwrap();
        let response = sender.send_request(request);
        let feed = tx.clone();
        tokio::spawn(async move {
            let mut data = vec![0u8];
            let prefix = u32::try_from(len).expect("a gRPC message length is a u32");
            data.extend_from_slice(&prefix.to_be_bytes());
            data.resize(5 + sent, b'x');
            for chunk in data.chunks(64 * 1024) {
                if feed
                    .send(Ok(Frame::data(Bytes::copy_from_slice(chunk))))
                    .await
                    .is_err()
                {
                    return; // answered: the stream is gone
                }
            }
        });
        let answer = tokio::spawn(async move {
            let response = response.await.ok()?;
            response
                .headers()
                .get("grpc-status")
                .and_then(|v| v.to_str().ok()?.parse().ok())
        });
        (tx, answer)
    }
}

/// An auth file, in a scratch folder of `test`, granting one new token
/// (returned) `use` in tenant `jobs`.
fn one_token(test: &str) -> (String, std::path::PathBuf) {
    let token = leasehold_server::auth::generate_token().unwrap();
    let file = common::certs::scratch(test).join("auth");
    let line = format!(
        "jobs use {}\n",
        leasehold_server::auth::token_credential(&token)
    );
    std::fs::write(&file, line).unwrap();
    (token, file)
}

/// A call with no known credential is answered from its headers: an
/// Acquire announcing a 900 KB message, of which only 100 KB came, gets
/// UNAUTHENTICATED at once. (Authenticating in the handler waited for the
/// whole message, buffering what a stranger sent.)
#[tokio::test]
async fn an_unauthenticated_body_is_refused_before_it_is_read() {
    let (token, file) = one_token("an_unauthenticated_body_is_refused_before_it_is_read");
    let broker = Broker::start_with("memory", move |c| c.auth_file = Some(file)).await;
    let mut sender = raw::connect(broker.addr).await;
    for credential in [None, Some("lh_not-a-token")] {
        let (_body, answer) = raw::unfinished_acquire(&mut sender, credential, 900_000, 100_000);
        let code = tokio::time::timeout(Duration::from_secs(10), answer)
            .await
            .expect("answered while the body is unfinished")
            .unwrap();
        assert_eq!(code, Some(tonic::Code::Unauthenticated as i32));
    }
    // With the token the same call waits for its message, as it must.
    let (_body, answer) = raw::unfinished_acquire(&mut sender, Some(&token), 900_000, 100_000);
    assert!(
        tokio::time::timeout(Duration::from_secs(2), answer)
            .await
            .is_err(),
        "an admitted call is not answered before its message is complete"
    );
    let scrape = common::scrape(broker.metrics_addr).await;
    assert_eq!(
        common::sample(
            &scrape,
            r#"leasehold_rejected_total{reason="unauthenticated"}"#
        ),
        2.0
    );
}

/// The reproduction of the memory attack: 100 Acquire streams on one
/// connection, each announcing a message of the largest size accepted and
/// sending all of it but 1 KB. Without a credential every one is refused
/// from its headers; with one, what the connection may make the broker
/// buffer is --conn-max-buffer (8 MiB), the rest are refused with
/// RESOURCE_EXHAUSTED. Either way the broker grows by less than 64 MB (it
/// grew by 395 MB with 4 MB messages, authenticating in the handler).
#[tokio::test]
async fn unfinished_messages_cannot_fill_the_brokers_memory() {
    const STREAMS: usize = 100;
    const LARGEST: usize = 1024 * 1024; // the default --max-message-size
    let (token, file) = one_token("unfinished_messages_cannot_fill_the_brokers_memory");
    let broker =
        BrokerProcess::start_logged("memory", &["--auth-file", file.to_str().unwrap()], None).await;
    for credential in [None, Some(token.as_str())] {
        let before = broker.rss();
        let mut sender = raw::connect(broker.addr).await;
        let mut bodies = Vec::new();
        let mut answers = Vec::new();
        for _ in 0..STREAMS {
            let (body, answer) =
                raw::unfinished_acquire(&mut sender, credential, LARGEST, LARGEST - 1024);
            bodies.push(body);
            answers.push(answer);
        }
        // Every refusal arrives (counted); the admitted calls wait for their
        // message, so they have no answer a moment later.
        let (reason, refusals) = match credential {
            None => ("unauthenticated", STREAMS),
            Some(_) => ("buffer", STREAMS - 8),
        };
        let series = format!(r#"leasehold_rejected_total{{reason="{reason}"}}"#);
        let base = common::sample(&common::scrape(broker.metrics_addr).await, &series);
        eventually(Duration::from_secs(60), "every refusal", || async {
            common::sample(&common::scrape(broker.metrics_addr).await, &series) - base
                >= refusals as f64
        })
        .await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
        let mut codes = Vec::new();
        for answer in answers {
            match tokio::time::timeout_at(deadline, answer).await {
                Ok(code) => codes.push(code.unwrap()),
                Err(_) => codes.push(None),
            }
        }
        let waiting = codes.iter().filter(|c| c.is_none()).count();
        let rss = broker.rss();
        let grown = rss.saturating_sub(before);
        eprintln!(
            "credential: {}, waiting: {waiting}, refused: {:?}, RSS {} -> {} MB (+{:.1} MB)",
            credential.is_some(),
            STREAMS - waiting,
            before / 1_000_000,
            rss / 1_000_000,
            grown as f64 / 1e6
        );
        let expected = match credential {
            None => tonic::Code::Unauthenticated,
            Some(_) => tonic::Code::ResourceExhausted,
        };
        assert!(
            codes.iter().flatten().all(|c| *c == expected as i32),
            "{codes:?}"
        );
        // --conn-max-buffer (8 MiB) holds exactly 8 messages of 1 MiB; each
        // refusal is counted once.
        assert_eq!(waiting, STREAMS - refusals);
        let counted = common::sample(&common::scrape(broker.metrics_addr).await, &series) - base;
        assert_eq!(counted, refusals as f64);
        assert!(grown < 64_000_000, "RSS grew by {grown} bytes");
        drop(bodies);
    }
}

/// The reproduction of the broken-stream attack: 1,000 one-hour leases, and
/// clients looping "new connection, one heartbeat naming all of them, the
/// connection cut" for 15 s. Every ended stream leaves its leases to be
/// looked at past their TTL, but each lease is remembered once, whatever
/// the number of streams that named it: the broker grows by less than
/// 64 MB (it grew by 1.2 GB when each ended stream kept its own list).
#[tokio::test]
async fn broken_streams_cannot_fill_the_brokers_memory() {
    use common::keepalive::{pair, Stream};
    const LEASES: usize = 1_000;
    const LOOPS: usize = 4;
    let broker = BrokerProcess::start("memory").await;
    let mut client = broker.client().await;
    let mut leases = Vec::with_capacity(LEASES);
    for i in 0..LEASES {
        leases.push(must_acquire(&mut client, &format!("kept/{i}"), 3_600_000).await);
    }
    let before = broker.rss();
    let until = Instant::now() + Duration::from_secs(15);
    let leases = std::sync::Arc::new(leases);
    let loops = (0..LOOPS).map(|_| {
        let (leases, addr) = (leases.clone(), broker.addr);
        tokio::spawn(async move {
            // Its own proxy, whose connections it cuts: the broker sees the
            // connection fail under the stream, as with a TCP reset.
            let proxy = common::proxy::Proxy::start(addr).await;
            let url = format!("http://{}", proxy.addr());
            let mut streams = 0u64;
            while Instant::now() < until {
                let channel = Channel::from_shared(url.clone())
                    .unwrap()
                    .connect()
                    .await
                    .unwrap();
                let mut doomed = LeaseholdServiceClient::new(channel);
                let mut stream = Stream::open(&mut doomed).await;
                let pairs: Vec<_> = leases.iter().map(pair).collect();
                let beat = stream.beat(&pairs).await.expect("a heartbeat's answer");
                assert_eq!(beat.leases.len(), LEASES);
                proxy.drop_connections();
                streams += 1;
            }
            streams
        })
    });
    let streams: u64 = futures_util::future::join_all(loops)
        .await
        .into_iter()
        .map(|n| n.unwrap())
        .sum();
    let rss = broker.rss();
    let grown = rss.saturating_sub(before);
    eprintln!(
        "{streams} streams of {LEASES} leases broken in 15 s: RSS {} -> {} MB (+{:.1} MB)",
        before / 1_000_000,
        rss / 1_000_000,
        grown as f64 / 1e6
    );
    assert!(
        streams >= 200,
        "only {streams} streams: the test proves little"
    );
    assert!(grown < 64_000_000, "RSS grew by {grown} bytes");
    // Still serving, and the leases still held.
    let d = client
        .describe(DescribeRequest {
            name: "kept/0".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(d.held, "{d:?}");
}

/// A Session stream whose client floods it and reads nothing: requests with
/// names of 200 KB (refused without a task of their own), waiting Acquires
/// up to the stream's cap, and try-Acquires whose answers pile up unread.
/// Back-pressure stops the reading; the broker grows by less than 64 MB,
/// and still serves.
#[tokio::test]
async fn a_session_flood_that_reads_nothing_cannot_fill_the_brokers_memory() {
    use leasehold_server::proto::{session_request::Request, SessionRequest};
    let broker = BrokerProcess::start("memory").await;
    let mut client = broker.client().await;
    let held = must_acquire(&mut client, "bystander", 3_600_000).await;
    let before = broker.rss();
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    let mut flooder = broker.client().await;
    // The answers' stream is kept and never read.
    let _unread = flooder
        .session(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .expect("a Session stream");
    let huge = "n".repeat(200_000);
    let feeding = tokio::spawn(async move {
        let mut sent = 0u64;
        for id in 0.. {
            let request = match id % 3 {
                0 => acquire_req(&huge, 60_000, "x", 0),
                1 => acquire_req("bystander", 60_000, "x", 600_000),
                _ => acquire_req("bystander", 60_000, "x", 0),
            };
            let send = tx.send(SessionRequest {
                id,
                timeout_ms: 0,
                request: Some(Request::Acquire(request)),
            });
            match tokio::time::timeout(Duration::from_secs(2), send).await {
                Ok(Ok(())) => sent += 1,
                // Back-pressure: the broker reads no more.
                Err(_) | Ok(Err(_)) => break,
            }
        }
        (sent, tx)
    });
    let (sent, _tx) = tokio::time::timeout(Duration::from_secs(120), feeding)
        .await
        .expect("back-pressure within 2 minutes")
        .unwrap();
    let rss = broker.rss();
    let grown = rss.saturating_sub(before);
    eprintln!(
        "{sent} requests sent before back-pressure: RSS {} -> {} MB (+{:.1} MB)",
        before / 1_000_000,
        rss / 1_000_000,
        grown as f64 / 1e6
    );
    assert!(
        sent >= 1_000,
        "only {sent} requests: the test proves little"
    );
    assert!(grown < 64_000_000, "RSS grew by {grown} bytes");
    bystander_intact(&mut client, held.fence, &held.owner_token).await;
}
