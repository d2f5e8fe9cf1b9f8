//! The brokers a benchmark measures: a bare HTTP/2 gRPC client, brokers of
//! the bench's own (child `leasehold serve` processes), and the store layer
//! opened straight on Redis (the direct baseline).

use std::{path::PathBuf, time::Duration};

use leasehold_proto::leasehold_service_client::LeaseholdServiceClient;

/// The `leasehold` binary the bench starts brokers and holders from:
/// `$LEASEHOLD_BIN`, else the `leasehold` beside this executable (both are
/// built into the same `target/<profile>/`), else `leasehold` on the PATH.
pub fn leasehold_exe() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("LEASEHOLD_BIN") {
        return Ok(PathBuf::from(path));
    }
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let beside = me.with_file_name(format!("leasehold{}", std::env::consts::EXE_SUFFIX));
    if beside.is_file() {
        return Ok(beside);
    }
    Ok(PathBuf::from("leasehold"))
}

/// A gRPC client over one bare HTTP/2 connection. tonic's `Channel` sends
/// every call through a buffer task (for load balancing and reconnection),
/// one more hand-off per call that a load generator, sharing the machine
/// with what it measures, cannot afford: this calls hyper's connection
/// directly. It does not reconnect.
pub type BenchClient = LeaseholdServiceClient<H2>;

/// hyper's HTTP/2 request sender as the service a tonic client calls.
#[derive(Clone)]
pub struct H2(hyper::client::conn::http2::SendRequest<tonic::body::Body>);

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
pub async fn bench_client(addr: std::net::SocketAddr) -> Result<BenchClient, String> {
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
    Ok(LeaseholdServiceClient::with_origin(H2(sender), origin))
}

/// A broker of the bench's own: a child `leasehold serve`, killed when
/// dropped.
pub struct OwnBroker {
    /// The child process (for its pid: RSS and CPU are read from /proc).
    pub child: tokio::process::Child,
    /// A client connected to it.
    pub grpc: BenchClient,
    /// Its URL, for child processes of the bench (`leasehold hold`).
    pub url: String,
    /// Where it serves /metrics.
    pub metrics: std::net::SocketAddr,
}

/// Starts a broker of the bench's own (`leasehold serve` on a free loopback
/// port, with `extra` flags) on `store`, and connects to it.
pub async fn start_broker(
    store: &str,
    extra: &[&str],
    key_prefix: &str,
) -> Result<OwnBroker, String> {
    start_broker_exe(&leasehold_exe()?, store, extra, key_prefix).await
}

/// [`start_broker`] with the broker binary `exe` (another build, to compare
/// two versions under the same load generator).
pub async fn start_broker_exe(
    exe: &std::path::Path,
    store: &str,
    extra: &[&str],
    key_prefix: &str,
) -> Result<OwnBroker, String> {
    // Two free ports, both bound until both are known (so not the same).
    let bind = || std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string());
    let (grpc_listener, metrics_listener) = (bind()?, bind()?);
    let port_of =
        |l: &std::net::TcpListener| l.local_addr().map(|a| a.port()).map_err(|e| e.to_string());
    let (port, metrics_port) = (port_of(&grpc_listener)?, port_of(&metrics_listener)?);
    drop((grpc_listener, metrics_listener));
    let child = tokio::process::Command::new(exe)
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--metrics-listen",
            &format!("127.0.0.1:{metrics_port}"),
        ])
        .args(["--store", store, "--key-prefix", key_prefix])
        // No census unless a bench asks for one: a walk of the store every
        // interval would run beside what is measured, and a broker killed
        // at the end leaves the census taker's lease behind.
        .args(
            (!extra.contains(&"--census-interval"))
                .then_some(["--census-interval", "0"])
                .into_iter()
                .flatten(),
        )
        .args(extra)
        // $BENCH_BROKER_LOG (a RUST_LOG filter, e.g.
        // `leasehold_server::lease=debug` for a waiter's timeline) on
        // stderr; warnings only by default.
        .env(
            "RUST_LOG",
            std::env::var("BENCH_BROKER_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start the broker {}: {e}", exe.display()))?;
    let url = format!("http://127.0.0.1:{port}");
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    for _ in 0..100 {
        if let Ok(grpc) = bench_client(addr).await {
            return Ok(OwnBroker {
                child,
                grpc,
                url,
                metrics: std::net::SocketAddr::from(([127, 0, 0, 1], metrics_port)),
            });
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
pub fn direct_store(
    store: &str,
    key_prefix: &str,
) -> Result<(tokio::runtime::Runtime, leasehold_server::store::Store), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let opened = {
        let _inside = runtime.enter();
        leasehold_server::store::Store::open(
            store,
            &leasehold_server::store::StoreOptions::new(
                key_prefix.to_owned(),
                Duration::from_secs(2),
            ),
        )
        .map_err(|e| e.to_string())?
    };
    Ok((runtime, opened))
}
