//! `leasehold-bench waiters`: N callers waiting on one lock, through a
//! broker of the bench's own (this build, or another one's binary with
//! `--broker-exe`, to compare two versions under the same load).
//!
//! 1. A holder takes the lock; N Acquire calls wait for it, spread over
//!    enough HTTP/2 connections for the broker's stream limit. The line is
//!    full when the store counts N waiters (Describe), or at
//!    `--fill-timeout`.
//! 2. Waiting: for `--hold`, the lock stays held; the CPU Redis and the
//!    broker use is what keeping N places in line costs.
//! 3. Handoffs: the holder releases; each waiter, once granted, releases at
//!    once and waits again (at the back of the line, which stays N long),
//!    for `--duration`. Handoff latency: from the moment the previous holder
//!    sent its release to the moment the next grant arrived.

use std::{
    process::ExitCode,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use leasehold_proto::{AcquireRequest, DescribeRequest, ReleaseRequest};
use leasehold_server::duration::parse_duration;

use crate::{
    broker::{bench_client, start_broker_exe, BenchClient},
    probe::cpu_seconds,
    stats::{nanos, percentile},
    EXIT_BROKER_ERROR,
};

/// Arguments of `bench waiters`.
#[derive(clap::Args, Debug)]
pub struct WaitersArgs {
    /// Redis URL the broker under test runs on (its CPU is read with INFO).
    #[arg(long)]
    store: String,
    /// Callers waiting on the lock.
    #[arg(long, default_value_t = 10_000)]
    waiters: usize,
    /// How long the lock stays held once the line is full (the cost of
    /// waiting alone).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    hold: Duration,
    /// How long handoffs run.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    duration: Duration,
    /// How long to wait for the line to fill before going on anyway.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    fill_timeout: Duration,
    /// The broker binary to run (default: this one).
    #[arg(long)]
    broker_exe: Option<std::path::PathBuf>,
    /// `--worker-threads` of the broker under test (0: one per core).
    #[arg(long, default_value_t = 1)]
    broker_worker_threads: usize,
}

/// Runs the scenario; see the module doc.
pub async fn waiters(args: WaitersArgs) -> ExitCode {
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("leasehold-bench waiters: {e}");
            ExitCode::from(EXIT_BROKER_ERROR)
        }
    }
}

/// Waiters per HTTP/2 connection: below the broker's default
/// `--max-concurrent-streams` (1,000).
const PER_CONNECTION: usize = 900;

/// What the waiters share.
#[derive(Default)]
struct Shared {
    /// Set when the run ends: waiters stop queueing again.
    stop: AtomicBool,
    /// Set while handoffs are measured.
    measuring: AtomicBool,
    /// When the last release was sent, in ns since `origin` (0: none yet).
    released_ns: AtomicU64,
    /// Handoff latencies measured, µs.
    handoffs_us: Mutex<Vec<u64>>,
    /// Acquire or Release calls that failed (timeouts, UNAVAILABLE...).
    errors: AtomicU64,
    /// The first failure, to report.
    first_error: Mutex<Option<String>>,
}

impl Shared {
    fn failed(&self, status: &tonic::Status) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let mut first = self
            .first_error
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if first.is_none() {
            *first = Some(format!("{:?}: {}", status.code(), status.message()));
        }
    }
}

async fn run(args: WaitersArgs) -> Result<(), String> {
    let exe = match &args.broker_exe {
        Some(exe) => exe.clone(),
        None => crate::broker::leasehold_exe()?,
    };
    let threads = args.broker_worker_threads.to_string();
    let max_waiters = args.waiters.max(10_000).to_string();
    let prefix = format!("waiters{}:", std::process::id());
    let broker = start_broker_exe(
        &exe,
        &args.store,
        &["--worker-threads", &threads, "--max-waiters", &max_waiters],
        &prefix,
    )
    .await?;
    let pid = broker.child.id().ok_or("the broker has no pid")?;
    let addr: std::net::SocketAddr = broker
        .url
        .trim_start_matches("http://")
        .parse()
        .map_err(|e| format!("broker address: {e}"))?;
    let mut redis = redis::Client::open(args.store.as_str())
        .map_err(|e| e.to_string())?
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| format!("cannot reach Redis: {e}"))?;
    // Redis's CPU is read from /proc, not with INFO: an overloaded Redis
    // answers INFO late or not at all.
    let redis_pid = redis_pid(&mut redis).await?;
    let stat = format!("/proc/{redis_pid}/stat");
    if !std::path::Path::new(&stat).exists() {
        return Err(format!(
            "cannot read Redis's CPU from {stat}: run the bench on Redis's machine"
        ));
    }
    let redis_cpu = || Ok::<_, String>(cpu_seconds(redis_pid));
    let name = "bench/waiters".to_owned();
    let mut holder = broker.grpc.clone();
    let held = holder
        .acquire(AcquireRequest {
            ttl_ms: 600_000,
            ..request(&name, 0)
        })
        .await
        .map_err(|s| format!("holder's acquire: {}", s.message()))?
        .into_inner()
        .lease
        .ok_or("no lease")?;

    let origin = Instant::now();
    let shared = Arc::new(Shared::default());
    let mut clients = Vec::new();
    for _ in 0..args.waiters.div_ceil(PER_CONNECTION) {
        clients.push(bench_client(addr).await?);
    }
    let tasks: Vec<_> = (0..args.waiters)
        .map(|i| {
            let client = clients[i / PER_CONNECTION].clone();
            tokio::spawn(wait_in_turn(
                client,
                name.clone(),
                Arc::clone(&shared),
                origin,
            ))
        })
        .collect();

    // 1. The line fills.
    let filling = Instant::now();
    let mut in_line = None;
    while filling.elapsed() < args.fill_timeout {
        in_line = waiters_in_line(&mut holder, &name).await.or(in_line);
        if in_line >= Some(args.waiters as u64) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let filled = filling.elapsed();

    // 2. Waiting.
    let redis_before = redis_cpu()?;
    let broker_cpu = cpu_seconds(pid);
    let errors = shared.errors.load(Ordering::Relaxed);
    let held_at = Instant::now();
    tokio::time::sleep(args.hold).await;
    let wall = held_at.elapsed().as_secs_f64();
    let hold_redis = (redis_cpu()? - redis_before) / wall * 100.0;
    let hold_broker = (cpu_seconds(pid) - broker_cpu) / wall * 100.0;
    let hold_errors = shared.errors.load(Ordering::Relaxed) - errors;
    let in_line_held = waiters_in_line(&mut holder, &name).await;

    // 3. Handoffs.
    let redis_before = redis_cpu()?;
    let broker_cpu = cpu_seconds(pid);
    let errors = shared.errors.load(Ordering::Relaxed);
    shared.measuring.store(true, Ordering::Relaxed);
    let started = Instant::now();
    shared
        .released_ns
        .store(nanos(origin.elapsed()), Ordering::Relaxed);
    // An overloaded store may time the release out: tried again, as a
    // client would, for as long as the run lasts.
    let mut holder_failed = 0;
    while let Err(status) = holder
        .release(ReleaseRequest {
            name: name.clone(),
            owner_token: held.owner_token.clone(),
        })
        .await
    {
        holder_failed += 1;
        if status.code() != tonic::Code::Unavailable || started.elapsed() >= args.duration {
            println!(
                "holder's release: {:?}: {}",
                status.code(),
                status.message()
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(args.duration.saturating_sub(started.elapsed())).await;
    shared.measuring.store(false, Ordering::Relaxed);
    let wall = started.elapsed().as_secs_f64();
    let run_redis = (redis_cpu()? - redis_before) / wall * 100.0;
    let run_broker = (cpu_seconds(pid) - broker_cpu) / wall * 100.0;
    let run_errors = shared.errors.load(Ordering::Relaxed) - errors + holder_failed;
    shared.stop.store(true, Ordering::Relaxed);
    let mut handoffs = std::mem::take(
        &mut *shared
            .handoffs_us
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    for task in &tasks {
        task.abort();
    }
    drop(broker);

    let n = handoffs.len();
    let max = handoffs.iter().copied().max().unwrap_or(0);
    let p50 = percentile(&mut handoffs, 0.50);
    let p99 = percentile(&mut handoffs, 0.99);
    println!(
        "{} waiters on one lock; broker {}, --worker-threads {}",
        args.waiters,
        exe.display(),
        args.broker_worker_threads
    );
    let count = |n: Option<u64>| n.map_or("? (Describe failed)".to_owned(), |n| n.to_string());
    println!(
        "line: {} waiting after {:.1} s (fill), {} after {:?} held",
        count(in_line),
        filled.as_secs_f64(),
        count(in_line_held),
        args.hold
    );
    println!(
        "held {:?}: Redis CPU {hold_redis:.1}%, broker CPU {hold_broker:.1}%, {hold_errors} failed calls",
        args.hold
    );
    println!(
        "handoffs {:?}: {n} ({:.0}/s), p50 {p50} µs, p99 {p99} µs, max {max} µs; Redis CPU {run_redis:.1}%, broker CPU {run_broker:.1}%, {run_errors} failed calls",
        args.duration,
        n as f64 / wall
    );
    if let Some(first) = shared
        .first_error
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .as_ref()
    {
        println!("first failed call: {first}");
    }
    Ok(())
}

fn request(name: &str, wait_timeout_ms: u64) -> AcquireRequest {
    AcquireRequest {
        name: name.to_owned(),
        ttl_ms: 60_000,
        holder: "leasehold-bench".into(),
        wait_timeout_ms,
        lock_delay_ms: 0,
        limit: 0,
        ..Default::default()
    }
}

/// The pid of the Redis server (INFO server), asked before the load starts.
async fn redis_pid(redis: &mut redis::aio::MultiplexedConnection) -> Result<u32, String> {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(redis)
        .await
        .map_err(|e| format!("INFO: {e}"))?;
    info.lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .and_then(|pid| pid.trim().parse().ok())
        .ok_or_else(|| "INFO server has no process_id".to_owned())
}

/// Waiters of the lock as the store counts them, on every broker.
async fn waiters_in_line(client: &mut BenchClient, name: &str) -> Option<u64> {
    client
        .describe(DescribeRequest {
            name: name.to_owned(),
            ..Default::default()
        })
        .await
        .ok()
        .map(|d| d.into_inner().waiters)
}

/// One waiter: waits for the lock, releases it at once when granted (the
/// handoff to the next), and waits again, until the run stops.
async fn wait_in_turn(mut client: BenchClient, name: String, shared: Arc<Shared>, origin: Instant) {
    while !shared.stop.load(Ordering::Relaxed) {
        // Within the broker's default --max-wait (300 s).
        let lease = match client.acquire(request(&name, 290_000)).await {
            Ok(granted) => granted.into_inner().lease,
            Err(status) => {
                shared.failed(&status);
                None
            }
        };
        let Some(lease) = lease else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let now = nanos(origin.elapsed());
        let released = shared.released_ns.load(Ordering::Relaxed);
        if shared.measuring.load(Ordering::Relaxed) && released != 0 {
            shared
                .handoffs_us
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(now.saturating_sub(released) / 1_000);
        }
        shared
            .released_ns
            .store(nanos(origin.elapsed()), Ordering::Relaxed);
        match client
            .release(ReleaseRequest {
                name: name.clone(),
                owner_token: lease.owner_token,
            })
            .await
        {
            Ok(_) => {}
            Err(status) => shared.failed(&status),
        }
    }
}
