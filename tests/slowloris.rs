//! No connection held open for free (issue 15, item 2): slowloris clients on
//! both ports. On the gRPC port a connection must finish its TLS handshake,
//! HTTP/2 preface and first SETTINGS frame within `--handshake-timeout`
//! (wrong bytes are closed at once), and one that stops answering pings is
//! closed after `--ping-interval` + `--ping-timeout`. On the metrics port at
//! most `--metrics-max-connections` are open, and one that trickles its
//! request or leaves its answer unread is closed after `--metrics-timeout`.
//! Meanwhile real clients are served within 2 s.
//!
//! Each test prints its measured figures (`cargo test --test slowloris --
//! --nocapture`); docs/reliability.md quotes them.

use leasehold_testkit as common;

use std::{
    net::SocketAddr,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use common::{
    certs::{scratch, write_server, Ca},
    eventually, must_acquire, sample, scrape, Broker, BrokerProcess,
};
use leasehold_server::proto::{leasehold_service_client::LeaseholdServiceClient, DescribeRequest};
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt},
    net::TcpStream,
    task::JoinHandle,
};
use tonic::{
    transport::{Certificate, Channel, ClientTlsConfig, Endpoint},
    Code,
};

/// What every HTTP/2 client sends first.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The bound on a real client's calls and scrapes while the port is under
/// attack.
const SERVED_WITHIN: Duration = Duration::from_secs(2);

/// An HTTP/2 frame: header (length, type, flags, stream 0) and payload.
fn frame(kind: u8, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut bytes = u32::try_from(payload.len()).unwrap().to_be_bytes()[1..].to_vec();
    bytes.extend_from_slice(&[kind, flags, 0, 0, 0, 0]);
    bytes.extend_from_slice(payload);
    bytes
}

const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const ACK: u8 = 0x1;

/// A raw connection that has sent `bytes`, and when it was opened.
async fn stalled(addr: SocketAddr, bytes: &[u8]) -> (TcpStream, Instant) {
    let opened = Instant::now();
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(bytes).await.unwrap();
    (stream, opened)
}

/// How long after `opened` the server closed `stream` (EOF or reset),
/// reading and discarding whatever it sends meanwhile; fails past `limit`.
async fn lifetime(
    mut stream: impl AsyncRead + Unpin,
    opened: Instant,
    limit: Duration,
    what: &str,
) -> Duration {
    let mut sink = [0u8; 4096];
    let closed = tokio::time::timeout(limit, async {
        loop {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "{what}: still open after {limit:?}");
    opened.elapsed()
}

/// Lifetimes of all `streams` (awaited together).
async fn lifetimes(
    streams: Vec<(TcpStream, Instant)>,
    limit: Duration,
    what: &str,
) -> Vec<Duration> {
    let waits = streams
        .into_iter()
        .map(|(stream, opened)| lifetime(stream, opened, limit, what));
    futures_util::future::join_all(waits).await
}

/// A real client's work, repeated until stopped: the slowest round and the
/// number of rounds. A round that fails fails the test.
struct Served {
    stop: Arc<AtomicBool>,
    task: JoinHandle<(Duration, u32)>,
}

impl Served {
    /// Repeats `round` every 50 ms.
    fn start<F, Fut>(what: &'static str, mut round: F) -> Self
    where
        F: FnMut() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<(), String>> + Send,
    {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let task = tokio::spawn(async move {
            let (mut slowest, mut rounds) = (Duration::ZERO, 0);
            while !stopped.load(Ordering::Relaxed) {
                let started = Instant::now();
                match tokio::time::timeout(Duration::from_secs(20), round()).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => panic!("{what} failed under attack: {e}"),
                    Err(_) => panic!("{what} took over 20 s under attack"),
                }
                slowest = slowest.max(started.elapsed());
                rounds += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            (slowest, rounds)
        });
        Served { stop, task }
    }

    /// Stops, and asserts every round was within [`SERVED_WITHIN`].
    async fn finish(self, what: &str) -> Duration {
        self.stop.store(true, Ordering::Relaxed);
        let (slowest, rounds) = self.task.await.expect("the real client panicked");
        assert!(rounds > 0, "{what}: no round ran");
        assert!(
            slowest < SERVED_WITHIN,
            "{what}: a round took {slowest:?} under attack"
        );
        eprintln!("figures: {what}: {rounds} rounds, slowest {slowest:?}");
        slowest
    }
}

/// A Describe from an established client, every 50 ms.
fn describing(client: &LeaseholdServiceClient<Channel>) -> Served {
    let client = client.clone();
    Served::start("Describe on an open connection", move || {
        let mut client = client.clone();
        async move {
            client
                .describe(DescribeRequest {
                    name: "bystander".into(),
                    ..Default::default()
                })
                .await
                .map(|_| ())
                .map_err(|s| format!("{s:?}"))
        }
    })
}

/// A new connection and a Describe on it, within [`SERVED_WITHIN`] of
/// trying (retrying while the broker refuses it).
async fn newcomer_served(url: String) -> Duration {
    let started = Instant::now();
    loop {
        if let Ok(channel) = Channel::from_shared(url.clone()).unwrap().connect().await {
            let served = LeaseholdServiceClient::new(channel)
                .describe(DescribeRequest {
                    name: "bystander".into(),
                    ..Default::default()
                })
                .await;
            if served.is_ok() {
                return started.elapsed();
            }
        }
        assert!(
            started.elapsed() < SERVED_WITHIN,
            "a new client was not served within {SERVED_WITHIN:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Three ways to stall a handshake: half the preface, the preface without
/// SETTINGS, the preface and half a SETTINGS frame. With
/// `--max-connections 4`, one real connection and three stalled ones fill
/// the broker (a newcomer is refused: the cap is real), the stalled ones are
/// closed at the 1 s deadline, and the real connection is served within 2 s
/// throughout; once the stalled ones are gone a newcomer is served.
#[tokio::test]
async fn stalled_handshakes_are_closed_at_the_deadline() {
    let timeout = Duration::from_secs(1);
    let broker = Broker::start_with("memory", |c| {
        c.max_connections = 4;
        c.handshake_timeout = timeout;
    })
    .await;
    let mut client = broker.client().await;
    must_acquire(&mut client, "bystander", 60_000).await;
    let served = describing(&client);
    let mut half_settings = PREFACE.to_vec();
    half_settings.extend_from_slice(&frame(SETTINGS, 0, &[0; 12])[..15]);
    let stalls: [(&str, &[u8]); 3] = [
        ("half a preface", &PREFACE[..16]),
        ("a preface without SETTINGS", PREFACE),
        ("half a SETTINGS frame", &half_settings),
    ];
    let mut longest = Duration::ZERO;
    for (what, bytes) in stalls {
        let mut streams = Vec::new();
        for _ in 0..3 {
            streams.push(stalled(broker.addr, bytes).await);
        }
        // The broker is full: a newcomer is told so.
        let mut newcomer =
            LeaseholdServiceClient::new(Channel::from_shared(broker.url()).unwrap().connect_lazy());
        let refused = newcomer
            .describe(DescribeRequest::default())
            .await
            .unwrap_err();
        assert_eq!(refused.code(), Code::Unavailable, "{what}: {refused:?}");
        assert!(
            refused.message().contains("--max-connections"),
            "{refused:?}"
        );
        let lived = lifetimes(streams, Duration::from_secs(20), what).await;
        let slowest = lived.iter().max().copied().unwrap_or_default();
        eprintln!("figures: {what}: closed after {lived:?}");
        assert!(
            slowest < timeout + Duration::from_secs(3),
            "{what}: open {slowest:?} with a {timeout:?} deadline"
        );
        longest = longest.max(slowest);
        let newcomer = newcomer_served(broker.url()).await;
        eprintln!("figures: {what}: a new client served {newcomer:?} after they closed");
    }
    served.finish("stalled handshakes, gRPC").await;
    let text = scrape(broker.metrics_addr).await;
    assert_eq!(
        sample(&text, r#"leasehold_rejected_total{reason="handshake"}"#),
        9.0
    );
    eprintln!("figures: stalled handshakes lived {longest:?} at most");
}

/// Bytes that are not an HTTP/2 client's beginning are closed at once, long
/// before the deadline, and counted.
#[tokio::test]
async fn wrong_prefaces_are_closed_at_once() {
    let broker = Broker::start_with("memory", |c| {
        c.handshake_timeout = Duration::from_secs(60);
    })
    .await;
    let mut client = broker.client().await;
    must_acquire(&mut client, "bystander", 60_000).await;
    let with_preface = |next: Vec<u8>| [PREFACE.to_vec(), next].concat();
    let wrong: [(&str, Vec<u8>); 5] = [
        ("HTTP/1.1", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()),
        (
            "a TLS hello on a plaintext port",
            vec![0x16, 0x03, 0x01, 0x02],
        ),
        ("a PING first", with_preface(frame(PING, 0, &[0; 8]))),
        (
            "a SETTINGS ACK first",
            with_preface(frame(SETTINGS, ACK, &[])),
        ),
        (
            "a 6,000-byte SETTINGS frame",
            with_preface(frame(SETTINGS, 0, &[0; 6_000])),
        ),
    ];
    for (what, bytes) in wrong {
        let (stream, opened) = stalled(broker.addr, &bytes).await;
        let lived = lifetime(stream, opened, Duration::from_secs(5), what).await;
        eprintln!("figures: {what}: closed after {lived:?}");
    }
    let text = scrape(broker.metrics_addr).await;
    assert_eq!(
        sample(&text, r#"leasehold_rejected_total{reason="handshake"}"#),
        5.0
    );
    must_acquire(&mut client, "still-served", 10_000).await;
}

/// Reads the server's frames, acknowledging its SETTINGS and, if `answer`,
/// its pings, until the server closes the connection or `limit` passes:
/// the pings seen, and whether it was closed.
async fn converse(
    stream: &mut (impl AsyncRead + AsyncWrite + Unpin),
    answer: bool,
    limit: Duration,
) -> (u32, bool) {
    let mut pings = 0;
    let talk = async {
        loop {
            let mut header = [0u8; 9];
            if stream.read_exact(&mut header).await.is_err() {
                return;
            }
            let length = u32::from_be_bytes([0, header[0], header[1], header[2]]) as usize;
            let mut payload = vec![0u8; length];
            if stream.read_exact(&mut payload).await.is_err() {
                return;
            }
            let reply = match (header[3], header[4] & ACK) {
                (SETTINGS, 0) => frame(SETTINGS, ACK, &[]),
                (PING, 0) => {
                    pings += 1;
                    if !answer {
                        continue;
                    }
                    frame(PING, ACK, &payload)
                }
                _ => continue,
            };
            if stream.write_all(&reply).await.is_err() {
                return;
            }
        }
    };
    let closed = tokio::time::timeout(limit, talk).await.is_ok();
    (pings, closed)
}

/// A connection that finished its handshake and stays idle is pinged; one
/// that never answers is closed within --ping-interval + --ping-timeout,
/// one that answers stays open.
#[tokio::test]
async fn connections_that_do_not_answer_pings_are_closed() {
    let broker = BrokerProcess::start_logged(
        "memory",
        &["--ping-interval", "500ms", "--ping-timeout", "1s"],
        None,
    )
    .await;
    let open = |addr| async move {
        let mut hello = PREFACE.to_vec();
        hello.extend_from_slice(&frame(SETTINGS, 0, &[]));
        stalled(addr, &hello).await
    };
    let (mut mute, opened) = open(broker.addr).await;
    let (mut polite, _) = open(broker.addr).await;
    let (mute_end, polite_end) = tokio::join!(
        async {
            let end = converse(&mut mute, false, Duration::from_secs(20)).await;
            (end, opened.elapsed())
        },
        converse(&mut polite, true, Duration::from_secs(4)),
    );
    let ((mute_pings, mute_closed), mute_lived) = mute_end;
    assert!(mute_closed, "a connection that ignores pings is still open");
    assert!(mute_pings >= 1, "closed without being pinged");
    // One interval and one timeout (1.5 s) from the end of the handshake.
    assert!(
        mute_lived < Duration::from_secs(5),
        "a mute connection lived {mute_lived:?}"
    );
    let (polite_pings, polite_closed) = polite_end;
    assert!(!polite_closed, "a connection that answers pings was closed");
    assert!(polite_pings >= 3, "{polite_pings} pings in 4 s");
    eprintln!(
        "figures: pings every 500 ms, 1 s to answer: a mute connection closed after \
         {mute_lived:?}; one answering {polite_pings} pings open after 4 s"
    );
    let mut client = broker.client().await;
    must_acquire(&mut client, "after-pings", 10_000).await;
}

/// After a finished TLS handshake the preface is due too: a TLS client that
/// stalls there is closed at the deadline, while a TLS client is served.
#[tokio::test]
async fn stalled_tls_connections_are_closed_at_the_deadline() {
    use tokio_rustls::{
        rustls::{
            self,
            pki_types::{pem::PemObject, CertificateDer, ServerName},
        },
        TlsConnector,
    };
    let dir = scratch("slowloris");
    let ca = Ca::new("leasehold slowloris CA");
    let (cert, key) = write_server(&dir, &ca.issue(&["localhost", "127.0.0.1"]));
    let timeout = Duration::from_secs(1);
    let broker = Broker::start_with("memory", |c| {
        c.tls_cert = Some(cert.into());
        c.tls_key = Some(key.into());
        c.handshake_timeout = timeout;
    })
    .await;
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&ca.pem))
        .domain_name("localhost");
    let endpoint = Endpoint::from_shared(format!("https://{}", broker.addr))
        .unwrap()
        .tls_config(tls)
        .unwrap();
    let mut connected = None;
    for _ in 0..50 {
        if let Ok(channel) = endpoint.connect().await {
            connected = Some(channel);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut client = LeaseholdServiceClient::new(connected.expect("a TLS client connects"));
    must_acquire(&mut client, "bystander", 60_000).await;
    let served = describing(&client);

    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca.pem.as_bytes()).unwrap())
        .unwrap();
    let mut config = rustls::ClientConfig::builder_with_provider(
        rustls::crypto::ring::default_provider().into(),
    )
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let connector = TlsConnector::from(Arc::new(config));
    let mut stalled_tls = Vec::new();
    for bytes in [&b""[..], &PREFACE[..10]] {
        let opened = Instant::now();
        let tcp = TcpStream::connect(broker.addr).await.unwrap();
        let mut stream = connector
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await
            .expect("the TLS handshake completes");
        stream.write_all(bytes).await.unwrap();
        stream.flush().await.unwrap();
        stalled_tls.push((stream, opened));
    }
    let waits = stalled_tls
        .into_iter()
        .map(|(s, opened)| lifetime(s, opened, Duration::from_secs(20), "stalled after TLS"));
    let lived = futures_util::future::join_all(waits).await;
    eprintln!("figures: stalled after a TLS handshake: closed after {lived:?}");
    for l in &lived {
        assert!(*l < timeout + Duration::from_secs(3), "open {l:?}");
    }
    served.finish("stalled TLS handshakes, gRPC over TLS").await;
}

/// A GET of /metrics on a fresh connection: the response if it is a 200.
async fn try_scrape(addr: SocketAddr) -> Option<String> {
    let mut stream = TcpStream::connect(addr).await.ok()?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    response.starts_with("HTTP/1.1 200").then_some(response)
}

/// A scrape every 50 ms.
fn scraping(addr: SocketAddr) -> Served {
    Served::start("a scrape", move || async move {
        try_scrape(addr)
            .await
            .map(|_| ())
            .ok_or_else(|| "no 200".to_owned())
    })
}

/// Slowloris on the metrics port: connections sending half a request line,
/// nothing, or going idle after a request are closed at --metrics-timeout
/// while Prometheus' scrapes are served within 2 s.
#[tokio::test]
async fn metrics_port_trickles_are_closed_at_the_timeout() {
    let broker = BrokerProcess::start_logged(
        "memory",
        &["--metrics-max-connections", "16", "--metrics-timeout", "1s"],
        None,
    )
    .await;
    let addr = broker.metrics_addr;
    let served = scraping(addr);
    let mut streams = Vec::new();
    for _ in 0..6 {
        streams.push(stalled(addr, b"GET /metr").await);
    }
    for _ in 0..3 {
        streams.push(stalled(addr, b"").await);
    }
    let kept_alive = stalled(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
    let lived = lifetimes(streams, Duration::from_secs(20), "metrics trickle").await;
    let idle = lifetime(kept_alive.0, kept_alive.1, Duration::from_secs(20), "idle").await;
    eprintln!("figures: metrics port: trickling/silent closed after {lived:?}, idle keep-alive after {idle:?}");
    for l in lived.iter().chain([&idle]) {
        assert!(*l < Duration::from_secs(4), "open {l:?} with a 1 s timeout");
    }
    served
        .finish("scrapes under a metrics-port slowloris")
        .await;
}

/// Past --metrics-max-connections a connection is closed at once (long
/// before the timeout); when the stalled ones go, scrapes are served again.
#[tokio::test]
async fn metrics_port_connections_are_capped() {
    let broker = BrokerProcess::start_logged(
        "memory",
        &["--metrics-max-connections", "2", "--metrics-timeout", "60s"],
        None,
    )
    .await;
    let addr = broker.metrics_addr;
    let held = [
        stalled(addr, b"GET /metr").await,
        stalled(addr, b"GET /metr").await,
    ];
    let (third, opened) = stalled(addr, b"GET /metrics HTTP/1.1\r\n").await;
    let refused = lifetime(third, opened, Duration::from_secs(5), "over the cap").await;
    assert!(try_scrape(addr).await.is_none(), "a scrape past the cap");
    eprintln!("figures: metrics port: over the cap closed after {refused:?}");
    drop(held);
    eventually(
        Duration::from_secs(5),
        "a scrape once slots free up",
        || async move { try_scrape(addr).await.is_some() },
    )
    .await;
}

/// A client that asks for the metrics over and over and never reads the
/// answers is closed once they have gone unread for --metrics-timeout, and
/// frees its slot.
#[tokio::test]
async fn metrics_answers_left_unread_are_bounded() {
    let broker = BrokerProcess::start_logged(
        "memory",
        &["--metrics-max-connections", "1", "--metrics-timeout", "1s"],
        None,
    )
    .await;
    let addr = broker.metrics_addr;
    let opened = Instant::now();
    let mut greedy = TcpStream::connect(addr).await.unwrap();
    // Pipelined requests, far more answers than socket buffers hold.
    let requests = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n".repeat(20_000);
    let writer = tokio::spawn(async move {
        let _ = greedy.write_all(&requests).await;
        // Held (unread) until the test ends.
        greedy
    });
    // The only slot is taken: scrapes are refused until it is closed.
    assert!(try_scrape(addr).await.is_none(), "the slot was free");
    eventually(
        Duration::from_secs(30),
        "a scrape once the greedy reader is closed",
        || async move { try_scrape(addr).await.is_some() },
    )
    .await;
    let freed = opened.elapsed();
    eprintln!(
        "figures: metrics port: a client not reading its answers freed its slot after {freed:?}"
    );
    assert!(freed < Duration::from_secs(10), "held {freed:?}");
    writer.abort();
}

/// Bounds of zero would turn the protection off: `leasehold serve` refuses
/// them at start-up, naming the flag.
#[test]
fn zero_bounds_are_refused_at_start() {
    for (flag, value) in [
        ("--ping-interval", "0s"),
        ("--ping-timeout", "0s"),
        ("--metrics-timeout", "0s"),
        ("--metrics-max-connections", "0"),
        ("--store-connections", "0"),
    ] {
        let mut serve = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(["--metrics-listen", "127.0.0.1:0", flag, value])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run leasehold serve");
        // A broker that accepted the value serves until killed.
        let started = Instant::now();
        let status = loop {
            if let Some(status) = serve.try_wait().unwrap() {
                break Some(status);
            }
            if started.elapsed() > Duration::from_secs(20) {
                let _ = serve.kill();
                let _ = serve.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut serve.stderr.take().unwrap(), &mut stderr).unwrap();
        assert!(
            status.is_some_and(|s| !s.success()),
            "{flag} {value} was accepted: {stderr}"
        );
        assert!(stderr.contains(flag), "{flag} {value}: {stderr}");
    }
}
