//! `leasehold-bench floor`: what a call costs on this machine before the
//! broker does any work, and what the Rust client library adds to it.
//!
//! 1. The gRPC floor. A bare tonic server, a child process of the bench's
//!    own (`leasehold-bench floor --serve-floor ADDR`: its CPU is read from
//!    /proc), answers Acquire and Release with canned answers: no store, no
//!    validation, no authentication, no metrics. It is built like the broker
//!    (mimalloc, one tokio thread by default, Nagle off, the broker's HTTP/2
//!    windows, pings and stream bounds), so its CPU per acquire+release
//!    cycle under the load `leasehold-bench cycles` puts on a broker is the
//!    share of the broker's CPU that is tonic, hyper and the kernel: the part
//!    no change to the broker's own code can remove.
//! 2. The client library's cost. The same load through
//!    `leasehold_client::Client` (as README.md shows it: `acquire` with
//!    `AcquireOptions::new()`, `Lease::release`) and through the bare
//!    generated `LeaseholdServiceClient` over a tonic `Channel` set up alike,
//!    both against that floor server (so the server side is identical): the
//!    load generator's own CPU per cycle for each, and their ratio (issue 18's
//!    target: the client at most 1.5x the bare Channel). The bench's own
//!    HTTP/2 client (`broker::BenchClient`, the one `cycles` uses) is
//!    measured too, for the floor server's figure under the cycles load.
//!
//! The floor server also answers KeepAlive (every lease alive, with the TTL
//! the load asks for): the client keeps each lease it hands out alive over
//! one KeepAlive stream, and against a server that refused the stream its
//! keeper would back off instead of doing its usual work. Every other call
//! is UNIMPLEMENTED.

use std::{
    future::Future,
    net::SocketAddr,
    process::ExitCode,
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant},
};

use futures_util::{stream::BoxStream, StreamExt};
use leasehold_client::{AcquireOptions, Client};
use leasehold_proto::{
    lease_status::State,
    leasehold_service_client::LeaseholdServiceClient,
    leasehold_service_server::{LeaseholdService, LeaseholdServiceServer},
    session_request, session_response, AcquireRequest, AcquireResponse, CampaignRequest,
    CampaignResponse, CheckFenceRequest, CheckFenceResponse, DescribeRequest, DescribeResponse,
    KeepAliveRequest, KeepAliveResponse, LeaderRequest, LeaderResponse, Lease, LeaseStatus,
    ListRequest, ListResponse, ObserveRequest, ObserveResponse, ReleaseRequest, ReleaseResponse,
    RenewRequest, RenewResponse, ResignRequest, ResignResponse, RevokeRequest, RevokeResponse,
    SessionRequest, SessionResponse,
};
use leasehold_server::duration::parse_duration;
use tonic::{transport::Channel, Request, Response, Status, Streaming};

use crate::{
    broker::BenchClient,
    cycles::Run,
    probe::cpu_seconds,
    session::SessionLink,
    stats::{micros, millis},
    EXIT_BROKER_ERROR,
};

/// Arguments of `bench floor`.
#[derive(clap::Args, Debug)]
pub struct FloorArgs {
    /// Worker counts (each worker cycles on a lock of its own, over one
    /// connection shared by all, as `cycles` does).
    #[arg(long, default_value = "1,64", value_delimiter = ',')]
    workers: Vec<usize>,
    /// How long each run lasts.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    duration: Duration,
    /// Worker threads of the floor server: 1 (one thread, as the broker
    /// under `--worker-threads 1`, the fastest on two cores), N, or 0 for
    /// one per core.
    #[arg(long, default_value_t = 1)]
    server_worker_threads: usize,
    /// Serve the floor on ADDR (e.g. `127.0.0.1:0`) and print the address
    /// bound, instead of measuring: the child process the measuring run
    /// starts. It exits when its standard input closes.
    #[arg(long, value_name = "ADDR")]
    serve_floor: Option<SocketAddr>,
}

impl FloorArgs {
    /// The worker threads of the runtime this process needs, if not the
    /// bench's usual one thread: only a floor server asked for more.
    pub fn server_runtime_threads(&self) -> Option<usize> {
        match (self.serve_floor, self.server_worker_threads) {
            (Some(_), threads) if threads != 1 => Some(threads),
            _ => None,
        }
    }
}

/// The TTL every cycle asks for (as `cycles` does).
const TTL: Duration = Duration::from_secs(10);

/// Runs the measurements, or serves the floor; see the module doc.
pub async fn floor(args: FloorArgs) -> ExitCode {
    let result = match args.serve_floor {
        Some(addr) => serve(addr).await,
        None => run(&args).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("leasehold-bench floor: {e}");
            ExitCode::from(EXIT_BROKER_ERROR)
        }
    }
}

/// The floor server: see the module doc.
#[derive(Default)]
struct Floor {
    /// Fences handed out; also makes each owner token unique (the client
    /// keys its leases by token, so one canned token would not do).
    /// Shared with the Session streams' answers.
    fences: std::sync::Arc<AtomicU64>,
}

/// A grant of what `request` asks, with the next fence.
fn canned_grant(fences: &AtomicU64, request: AcquireRequest) -> AcquireResponse {
    let fence = fences.fetch_add(1, Ordering::Relaxed) + 1;
    AcquireResponse {
        lease: Some(Lease {
            name: request.name,
            // The length of a real owner token.
            owner_token: format!("{fence:032x}"),
            fence,
            ttl_ms: request.ttl_ms,
        }),
        waited_ms: 0,
    }
}

/// Every lease of a heartbeat alive, with the TTL the load asks for.
fn all_alive(beat: KeepAliveRequest) -> KeepAliveResponse {
    KeepAliveResponse {
        seq: beat.seq,
        leases: beat
            .leases
            .into_iter()
            .map(|lease| LeaseStatus {
                name: lease.name,
                state: State::Alive as i32,
                ttl_ms: millis(TTL),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

fn unimplemented() -> Status {
    Status::unimplemented(
        "the floor server answers Acquire, Release and KeepAlive, and on Session those and heartbeats only",
    )
}

#[tonic::async_trait]
impl LeaseholdService for Floor {
    type KeepAliveStream = BoxStream<'static, Result<KeepAliveResponse, Status>>;
    type ObserveStream = BoxStream<'static, Result<ObserveResponse, Status>>;
    type SessionStream = BoxStream<'static, Result<SessionResponse, Status>>;

    /// The same canned answers as messages on a Session stream, answered
    /// in order as they come (a real broker runs them concurrently).
    async fn session(
        &self,
        request: Request<Streaming<SessionRequest>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        let fences = std::sync::Arc::clone(&self.fences);
        let answers = request.into_inner().map(move |request| {
            let SessionRequest { id, request, .. } = request?;
            let response = match request {
                Some(session_request::Request::Acquire(acquire)) => {
                    session_response::Response::Acquire(canned_grant(&fences, acquire))
                }
                Some(session_request::Request::Release(_)) => {
                    session_response::Response::Release(ReleaseResponse {})
                }
                Some(session_request::Request::Heartbeat(beat)) => {
                    session_response::Response::Heartbeat(all_alive(beat))
                }
                _ => return Err(unimplemented()),
            };
            Ok(SessionResponse {
                id,
                response: Some(response),
            })
        });
        Ok(Response::new(answers.boxed()))
    }

    async fn acquire(
        &self,
        request: Request<AcquireRequest>,
    ) -> Result<Response<AcquireResponse>, Status> {
        Ok(Response::new(canned_grant(
            &self.fences,
            request.into_inner(),
        )))
    }

    async fn release(
        &self,
        _request: Request<ReleaseRequest>,
    ) -> Result<Response<ReleaseResponse>, Status> {
        Ok(Response::new(ReleaseResponse {}))
    }

    async fn keep_alive(
        &self,
        request: Request<Streaming<KeepAliveRequest>>,
    ) -> Result<Response<Self::KeepAliveStream>, Status> {
        let beats = request.into_inner().map(|beat| beat.map(all_alive));
        Ok(Response::new(beats.boxed()))
    }

    async fn renew(&self, _: Request<RenewRequest>) -> Result<Response<RenewResponse>, Status> {
        Err(unimplemented())
    }

    async fn describe(
        &self,
        _: Request<DescribeRequest>,
    ) -> Result<Response<DescribeResponse>, Status> {
        Err(unimplemented())
    }

    async fn list(&self, _: Request<ListRequest>) -> Result<Response<ListResponse>, Status> {
        Err(unimplemented())
    }

    async fn check_fence(
        &self,
        _: Request<CheckFenceRequest>,
    ) -> Result<Response<CheckFenceResponse>, Status> {
        Err(unimplemented())
    }

    async fn revoke(&self, _: Request<RevokeRequest>) -> Result<Response<RevokeResponse>, Status> {
        Err(unimplemented())
    }

    async fn campaign(
        &self,
        _: Request<CampaignRequest>,
    ) -> Result<Response<CampaignResponse>, Status> {
        Err(unimplemented())
    }

    async fn leader(&self, _: Request<LeaderRequest>) -> Result<Response<LeaderResponse>, Status> {
        Err(unimplemented())
    }

    async fn observe(
        &self,
        _: Request<ObserveRequest>,
    ) -> Result<Response<Self::ObserveStream>, Status> {
        Err(unimplemented())
    }

    async fn resign(&self, _: Request<ResignRequest>) -> Result<Response<ResignResponse>, Status> {
        Err(unimplemented())
    }
}

/// Serves the floor on `addr` until standard input closes (the measuring
/// run holds the other end: the server does not outlive it, even if it is
/// killed). Prints the address bound as the first line on standard output.
async fn serve(addr: SocketAddr) -> Result<(), String> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    println!("{bound}");
    std::thread::spawn(|| {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        std::process::exit(0);
    });
    // The broker's settings that bear on a unary call (server/src/service/
    // mod.rs and conn.rs); none of its layers.
    tonic::transport::Server::builder()
        .initial_stream_window_size(Some(1 << 20))
        .initial_connection_window_size(Some(4 << 20))
        .http2_keepalive_interval(Some(Duration::from_secs(20)))
        .http2_keepalive_timeout(Some(Duration::from_secs(10)))
        .max_concurrent_streams(Some(1_000))
        .http2_max_header_list_size(Some(16 * 1024))
        .add_service(
            LeaseholdServiceServer::new(Floor::default())
                .max_decoding_message_size(1 << 20)
                .max_encoding_message_size(1 << 20),
        )
        .serve_with_incoming(
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
        )
        .await
        .map_err(|e| format!("the floor server stopped: {e}"))
}

/// A floor server child process, killed when dropped (and exiting by
/// itself when this process ends: its standard input closes).
struct FloorServer {
    child: tokio::process::Child,
    addr: SocketAddr,
}

impl FloorServer {
    async fn start(threads: usize) -> Result<FloorServer, String> {
        use tokio::io::AsyncBufReadExt;
        let me = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut child = tokio::process::Command::new(&me)
            .args(["floor", "--serve-floor", "127.0.0.1:0"])
            .args(["--server-worker-threads", &threads.to_string()])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start the floor server {}: {e}", me.display()))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .map_err(|_| "the floor server did not come up in 30 s")?
            .map_err(|e| e.to_string())?
            .ok_or("the floor server exited before listening")?;
        let addr = first
            .trim()
            .parse()
            .map_err(|e| format!("the floor server printed {first:?}, not an address: {e}"))?;
        Ok(FloorServer { child, addr })
    }

    fn pid(&self) -> Result<u32, String> {
        self.child
            .id()
            .ok_or_else(|| "the floor server exited".into())
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// One way of calling: a client, cloned for each worker.
trait Cycle: Clone + Send + 'static {
    /// What release needs.
    type Held: Send;
    fn acquire_one(
        &mut self,
        name: &str,
    ) -> impl Future<Output = Result<Self::Held, String>> + Send;
    fn release_one(&mut self, held: Self::Held) -> impl Future<Output = Result<(), String>> + Send;
}

/// The generated client over some transport: the request `cycles` sends.
macro_rules! bare_cycle {
    ($client:ty) => {
        impl Cycle for $client {
            type Held = Lease;

            async fn acquire_one(&mut self, name: &str) -> Result<Lease, String> {
                self.acquire(AcquireRequest {
                    name: name.to_owned(),
                    ttl_ms: millis(TTL),
                    ..Default::default()
                })
                .await
                .map_err(|s| format!("acquire: {}", s.message()))?
                .into_inner()
                .lease
                .ok_or_else(|| "no lease".to_owned())
            }

            async fn release_one(&mut self, lease: Lease) -> Result<(), String> {
                self.release(ReleaseRequest {
                    name: lease.name,
                    owner_token: lease.owner_token,
                })
                .await
                .map_err(|s| format!("release: {}", s.message()))?;
                Ok(())
            }
        }
    };
}

bare_cycle!(BenchClient);
bare_cycle!(LeaseholdServiceClient<Channel>);

/// Acquire and Release as messages on one Session stream (shared by the
/// workers), over the bench's HTTP/2 connection.
impl Cycle for std::sync::Arc<SessionLink> {
    type Held = Lease;

    async fn acquire_one(&mut self, name: &str) -> Result<Lease, String> {
        self.acquire(AcquireRequest {
            name: name.to_owned(),
            ttl_ms: millis(TTL),
            ..Default::default()
        })
        .await
    }

    async fn release_one(&mut self, lease: Lease) -> Result<(), String> {
        self.release(lease).await
    }
}

/// The client library as its README shows it.
impl Cycle for Client {
    type Held = leasehold_client::Lease;

    async fn acquire_one(&mut self, name: &str) -> Result<leasehold_client::Lease, String> {
        self.acquire(name, AcquireOptions::new().ttl(TTL))
            .await
            .map_err(|e| format!("acquire: {e}"))
    }

    async fn release_one(&mut self, lease: leasehold_client::Lease) -> Result<(), String> {
        lease.release().await.map_err(|e| format!("release: {e}"))
    }
}

/// `workers` workers, each on a lock of its own, acquire and release
/// through clones of `client` for `duration`; acquires are timed.
async fn cycles<C: Cycle>(
    client: &C,
    workers: usize,
    duration: Duration,
    tag: &str,
) -> Result<Run, String> {
    let end = Instant::now() + duration;
    let mut tasks = Vec::new();
    for w in 0..workers {
        let mut client = client.clone();
        let name = format!("bench/floor/{}/{tag}/{workers}/{w}", std::process::id());
        tasks.push(tokio::spawn(async move {
            let mut run = Run::default();
            while Instant::now() < end {
                let started = Instant::now();
                let held = client.acquire_one(&name).await?;
                run.latencies_us.push(micros(started.elapsed()));
                client.release_one(held).await?;
                run.cycles += 1;
            }
            Ok::<Run, String>(run)
        }));
    }
    crate::cycles::merge(tasks).await
}

/// CPU seconds (user + system) this process has used so far, to the
/// microsecond (getrusage; /proc counts in clock ticks).
fn own_cpu_seconds() -> f64 {
    // SAFETY: an all-zero rusage is a valid value of that plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes one rusage to the valid pointer it is given.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return 0.0;
    }
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// One measured run: throughput, acquire latency, CPU per cycle.
struct Measured {
    run: Run,
    server_us: f64,
    load_us: f64,
}

/// Runs `cycles` through `client` with the CPU of the floor server (`pid`)
/// and of this process read around it.
async fn measure<C: Cycle>(
    client: &C,
    pid: u32,
    workers: usize,
    duration: Duration,
    tag: &str,
) -> Result<Measured, String> {
    let (server, load) = (cpu_seconds(pid), own_cpu_seconds());
    let run = cycles(client, workers, duration, tag).await?;
    let per_cycle = |after: f64, before: f64| (after - before) * 1e6 / run.cycles.max(1) as f64;
    Ok(Measured {
        server_us: per_cycle(cpu_seconds(pid), server),
        load_us: per_cycle(own_cpu_seconds(), load),
        run,
    })
}

/// Row labels (the test finds the rows by them).
const BENCH_H2: &str = "bench HTTP/2 client";
const BARE: &str = "tonic Channel, bare";
const CLIENT: &str = "leasehold_client::Client";
const SESSION: &str = "Session stream, bare";

async fn run(args: &FloorArgs) -> Result<(), String> {
    let server = FloorServer::start(args.server_worker_threads).await?;
    let pid = server.pid()?;
    let h2 = crate::broker::bench_client(server.addr).await?;
    // The Channel as leasehold-client sets its own up, minus the pings (an
    // idle connection's business, not a call's).
    let channel = Channel::from_shared(server.url())
        .map_err(|e| e.to_string())?
        .tcp_nodelay(true)
        .initial_stream_window_size(Some(1 << 20))
        .initial_connection_window_size(Some(4 << 20))
        .connect()
        .await
        .map_err(|e| format!("cannot reach the floor server: {e}"))?;
    let bare = LeaseholdServiceClient::new(channel);
    let client = Client::connect(server.url())
        .await
        .map_err(|e| format!("cannot reach the floor server: {e}"))?;
    let threads = match args.server_worker_threads {
        0 => "a thread per core".to_owned(),
        1 => "1 thread".to_owned(),
        n => format!("{n} threads"),
    };
    println!(
        "floor server: bare tonic, canned Acquire/Release, mimalloc, {threads} (pid {pid}); {:.1} s per run",
        args.duration.as_secs_f64()
    );
    println!(
        "{:<26} {:>7} {:>10} {:>18} {:>16} {:>23}",
        "client",
        "workers",
        "cycles/s",
        "acquire p50/p99 µs",
        "server µs/cycle",
        "load generator µs/cycle"
    );
    let per_s = |r: &Run| r.cycles as f64 / args.duration.as_secs_f64();
    let print = |label: &str, workers: usize, m: &Measured| {
        println!(
            "{label:<26} {workers:>7} {:>10.0} {:>18} {:>16.1} {:>23.1}",
            per_s(&m.run),
            format!("{}/{}", m.run.percentile(0.5), m.run.percentile(0.99)),
            m.server_us,
            m.load_us
        );
    };
    let mut ratios = Vec::new();
    for &workers in &args.workers {
        let measured = measure(&h2, pid, workers, args.duration, "h2").await?;
        print(BENCH_H2, workers, &measured);
        let session = SessionLink::open(&mut h2.clone()).await?;
        let session = measure(&session, pid, workers, args.duration, "session").await?;
        print(SESSION, workers, &session);
        let bare = measure(&bare, pid, workers, args.duration, "bare").await?;
        print(BARE, workers, &bare);
        let client = measure(&client, pid, workers, args.duration, "client").await?;
        print(CLIENT, workers, &client);
        ratios.push((workers, client.load_us, bare.load_us));
    }
    for (workers, client, bare) in ratios {
        println!(
            "client/bare load generator CPU per cycle, {workers} workers: {client:.1} / {bare:.1} µs = {:.2}x (issue 18 target <= 1.5x)",
            client / bare.max(f64::MIN_POSITIVE)
        );
    }
    Ok(())
}
