//! `leasehold bench`: load generators against a running broker, bounded in
//! time, printing the figures quoted in README.md and BENCHMARKS.md.

use std::{
    process::ExitCode,
    time::{Duration, Instant},
};

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::{BrokerArgs, EXIT_BROKER_ERROR};
use crate::{
    config::parse_duration,
    proto::{
        lease_status::State, leasehold_client::LeaseholdClient, AcquireRequest, KeepAliveRequest,
        Lease, LeaseRef, ReleaseRequest,
    },
};

/// `leasehold bench ...`
#[derive(clap::Subcommand, Debug)]
pub enum BenchCommand {
    /// Heartbeat round trips on one KeepAlive stream holding N leases: each
    /// heartbeat renews all N (one store round trip) and the next is sent
    /// when the answer arrives.
    Keepalive(KeepaliveArgs),
    /// A bounded soak: starts its own broker, keeps N leases alive over S
    /// streams, and reports the broker's RSS, heartbeat p99 and lost leases.
    Soak(super::soak::SoakArgs),
    /// Acquire+release cycles through a broker and straight against Redis
    /// with the same scripts (the ratio), then one contended lock.
    Cycles(super::cycles::CyclesArgs),
    /// N leases kept alive over S KeepAlive streams through a broker and
    /// renewed straight against Redis with the same batching: renewal
    /// latency, losses, CPU and memory of broker and Redis.
    Heartbeats(super::heartbeats::HeartbeatsArgs),
    /// N callers waiting on one lock through a broker of the bench's own:
    /// Redis and broker CPU while they wait, then handoffs down the line
    /// (each grantee releases at once and queues again at the back):
    /// handoffs per second and handoff latency percentiles.
    Waiters(super::waiters::WaitersArgs),
}

/// Arguments of `bench keepalive`.
#[derive(clap::Args, Debug)]
pub struct KeepaliveArgs {
    #[command(flatten)]
    broker: BrokerArgs,
    /// Leases on the stream (comma-separated for several runs, e.g. `1,1000`).
    #[arg(long, default_value = "1,1000", value_delimiter = ',')]
    leases: Vec<usize>,
    /// How long to send heartbeats, per run.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    duration: Duration,
}

/// Runs a benchmark.
pub async fn bench(command: BenchCommand) -> ExitCode {
    match command {
        BenchCommand::Keepalive(args) => keepalive(args).await,
        BenchCommand::Soak(args) => super::soak::soak(args).await,
        BenchCommand::Cycles(args) => super::cycles::cycles(args).await,
        BenchCommand::Heartbeats(args) => super::heartbeats::heartbeats(args).await,
        BenchCommand::Waiters(args) => super::waiters::waiters(args).await,
    }
}

async fn keepalive(args: KeepaliveArgs) -> ExitCode {
    let mut grpc = match args.broker.grpc().await {
        Ok(g) => g,
        Err(code) => return code,
    };
    println!(
        "{:>8} {:>8} {:>10} {:>10} {:>10} {:>12}",
        "leases", "beats", "p50_us", "p99_us", "max_us", "renewals/s"
    );
    for &n in &args.leases {
        match keepalive_run(&mut grpc, n, args.duration).await {
            Ok(()) => {}
            Err(e) => {
                eprintln!("leasehold bench: {e}");
                return ExitCode::from(EXIT_BROKER_ERROR);
            }
        }
    }
    ExitCode::SUCCESS
}

async fn keepalive_run(
    grpc: &mut crate::client::Broker,
    n: usize,
    duration: Duration,
) -> Result<(), String> {
    let run = std::process::id();
    let mut leases: Vec<Lease> = Vec::with_capacity(n);
    for i in 0..n {
        let response = grpc
            .acquire(AcquireRequest {
                name: format!("bench/keepalive/{run}/{n}/{i}"),
                ttl_ms: 60_000,
                holder: "leasehold-bench".into(),
                wait_timeout_ms: 0,
                lock_delay_ms: 0,
                limit: 0,
            })
            .await
            .map_err(|s| format!("acquire: {}", s.message()))?;
        leases.extend(response.into_inner().lease);
    }
    let refs: Vec<LeaseRef> = leases
        .iter()
        .map(|l| LeaseRef {
            name: l.name.clone(),
            owner_token: l.owner_token.clone(),
            ttl_ms: 0,
        })
        .collect();

    let (tx, rx) = mpsc::channel(1);
    let mut responses = grpc
        .keep_alive(ReceiverStream::new(rx))
        .await
        .map_err(|s| format!("keep_alive: {}", s.message()))?
        .into_inner();
    let mut rtts = Vec::new();
    let started = Instant::now();
    let mut seq = 0u64;
    // The first 10 heartbeats warm up connections and caches; not counted.
    while seq < 10 || started.elapsed() < duration {
        seq += 1;
        let sent = Instant::now();
        tx.send(KeepAliveRequest {
            seq,
            leases: refs.clone(),
        })
        .await
        .map_err(|_| "the stream closed".to_owned())?;
        let response = responses
            .message()
            .await
            .map_err(|s| format!("heartbeat: {}", s.message()))?
            .ok_or("the stream ended")?;
        let rtt = sent.elapsed();
        if let Some(bad) = response.leases.iter().find(|s| s.state() != State::Alive) {
            return Err(format!(
                "lease {} not alive: {:?} {}",
                bad.name,
                bad.state(),
                bad.message
            ));
        }
        if seq > 10 {
            rtts.push(rtt);
        }
    }
    drop(tx);
    let elapsed = started.elapsed().as_secs_f64();
    rtts.sort();
    let pct = |p: f64| {
        rtts.get(((rtts.len() as f64 * p) as usize).min(rtts.len().saturating_sub(1)))
            .map_or(0, |d| d.as_micros())
    };
    println!(
        "{:>8} {:>8} {:>10} {:>10} {:>10} {:>12.0}",
        n,
        rtts.len(),
        pct(0.50),
        pct(0.99),
        rtts.last().map_or(0, |d| d.as_micros()),
        (seq as f64 * n as f64) / elapsed
    );
    for lease in leases {
        let _ = grpc
            .release(ReleaseRequest {
                name: lease.name,
                owner_token: lease.owner_token,
            })
            .await;
    }
    Ok(())
}

/// A gRPC client over one bare HTTP/2 connection. tonic's `Channel` sends
/// every call through a buffer task (for load balancing and reconnection),
/// one more hand-off per call that a load generator, sharing the machine
/// with what it measures, cannot afford: this calls hyper's connection
/// directly. It does not reconnect.
pub(super) type BenchClient = LeaseholdClient<H2>;

/// hyper's HTTP/2 request sender as the service a tonic client calls.
#[derive(Clone)]
pub(super) struct H2(hyper::client::conn::http2::SendRequest<tonic::body::Body>);

impl tonic::codegen::Service<tonic::codegen::http::Request<tonic::body::Body>> for H2 {
    type Response = tonic::codegen::http::Response<hyper::body::Incoming>;
    type Error = hyper::Error;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: tonic::codegen::http::Request<tonic::body::Body>) -> Self::Future {
        Box::pin(self.0.send_request(request))
    }
}

/// Connects a [`BenchClient`] to `addr` (Nagle off, the broker's window
/// sizes).
pub(super) async fn bench_client(addr: std::net::SocketAddr) -> Result<BenchClient, String> {
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("cannot reach the broker at {addr}: {e}"))?;
    tcp.set_nodelay(true).map_err(|e| e.to_string())?;
    let (sender, connection) =
        hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .initial_stream_window_size(1 << 20)
            .initial_connection_window_size(4 << 20)
            .handshake(hyper_util::rt::TokioIo::new(tcp))
            .await
            .map_err(|e| format!("HTTP/2 handshake with {addr}: {e}"))?;
    tokio::spawn(connection);
    let origin = format!("http://{addr}")
        .parse()
        .map_err(|e| format!("{e}"))?;
    Ok(LeaseholdClient::with_origin(H2(sender), origin))
}

/// A broker of the bench's own: a child `leasehold serve`, killed when
/// dropped.
pub(super) struct OwnBroker {
    /// The child process (for its pid: RSS and CPU are read from /proc).
    pub child: tokio::process::Child,
    /// A client connected to it.
    pub grpc: BenchClient,
    /// Its URL, for child processes of the bench (`leasehold hold`).
    pub url: String,
}

/// Starts a broker of the bench's own (`leasehold serve` on a free loopback
/// port, with `extra` flags) on `store`, and connects to it.
pub(super) async fn start_broker(
    store: &str,
    extra: &[&str],
    key_prefix: &str,
) -> Result<OwnBroker, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    start_broker_exe(&exe, store, extra, key_prefix).await
}

/// [`start_broker`] with the broker binary `exe` (another build, to compare
/// two versions under the same load generator).
pub(super) async fn start_broker_exe(
    exe: &std::path::Path,
    store: &str,
    extra: &[&str],
    key_prefix: &str,
) -> Result<OwnBroker, String> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    let child = tokio::process::Command::new(exe)
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--metrics-listen",
            "127.0.0.1:0",
        ])
        .args(["--store", store, "--key-prefix", key_prefix])
        .args(extra)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start the broker {}: {e}", exe.display()))?;
    let url = format!("http://127.0.0.1:{port}");
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    for _ in 0..100 {
        if let Ok(grpc) = bench_client(addr).await {
            return Ok(OwnBroker { child, grpc, url });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err("the broker did not come up".into())
}

/// The store layer opened straight on `store` (the direct baseline), on a
/// runtime of its own with a thread per core: measured faster for it than
/// one thread, so the baseline is the best this client library does. Shut
/// the runtime down with `shutdown_background` (dropping it inside another
/// runtime would block).
pub(super) fn direct_store(
    store: &str,
    key_prefix: &str,
) -> Result<(tokio::runtime::Runtime, crate::store::Store), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let opened = {
        let _inside = runtime.enter();
        crate::store::Store::open(
            store,
            &crate::store::StoreOptions::new(key_prefix.to_owned(), Duration::from_secs(2)),
        )
        .map_err(|e| e.to_string())?
    };
    Ok((runtime, opened))
}
