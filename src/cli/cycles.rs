//! `leasehold bench cycles`: acquire+release cycles through a broker of the
//! bench's own and, in the same run, straight against Redis with the same Lua
//! scripts (the store layer the broker uses: the floor no broker can beat);
//! then one contended lock with N waiters. Prints a table with the ratios.

use std::{
    process::ExitCode,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use super::EXIT_BROKER_ERROR;
use crate::{
    config::parse_duration,
    lease::token,
    proto::{leasehold_client::LeaseholdClient, AcquireRequest, ReleaseRequest},
    store::{Acquired, GrantSpec, Store, StoreOptions},
};

/// Arguments of `bench cycles`.
#[derive(clap::Args, Debug)]
pub struct CyclesArgs {
    /// Redis URL: the broker under test runs on it, and the direct baseline
    /// talks to it.
    #[arg(long)]
    store: String,
    /// Worker counts for the uncontended runs (each worker cycles on a lock
    /// of its own).
    #[arg(long, default_value = "1,16,64", value_delimiter = ',')]
    workers: Vec<usize>,
    /// Waiters on one lock for the contended run (0 to skip it).
    #[arg(long, default_value_t = 16)]
    contended: usize,
    /// How long each run lasts.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    duration: Duration,
    /// `--worker-threads` of the broker under test. 1 is the fastest where
    /// load generator, broker and Redis share two cores; 0 is one per core.
    #[arg(long, default_value_t = 1)]
    broker_worker_threads: usize,
}

/// Runs the scenarios; see the module doc.
pub async fn cycles(args: CyclesArgs) -> ExitCode {
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("leasehold bench cycles: {e}");
            ExitCode::from(EXIT_BROKER_ERROR)
        }
    }
}

/// Latencies (µs) and a count of completed cycles.
#[derive(Default)]
struct Run {
    cycles: u64,
    latencies_us: Vec<u64>,
}

impl Run {
    fn percentile(&self, p: f64) -> u64 {
        let mut sorted = self.latencies_us.clone();
        sorted.sort_unstable();
        sorted
            .get(((sorted.len() as f64 * p) as usize).min(sorted.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    }
}

async fn run(args: CyclesArgs) -> Result<(), String> {
    let run_id = std::process::id();
    let threads = args.broker_worker_threads.to_string();
    let (_broker, grpc) = super::bench::start_broker(
        &args.store,
        &["--worker-threads", &threads],
        &format!("cycles{run_id}:"),
    )
    .await?;
    // Each side runs on the runtime that serves it best on a small machine:
    // the gRPC clients on this process's one thread (fewest hand-offs), the
    // direct baseline on a runtime with a thread per core (measured faster
    // for it at 16 workers, and never slower). The baseline stays the best
    // this client library does.
    let direct_runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let direct = {
        let _inside = direct_runtime.enter();
        Store::open(
            &args.store,
            &StoreOptions::new(format!("cycles{run_id}d:"), Duration::from_secs(1)),
        )
        .map_err(|e| e.to_string())?
    };
    let result = scenarios(&args, &grpc, &direct, direct_runtime.handle()).await;
    // Dropping a runtime may block; not allowed inside this one.
    direct_runtime.shutdown_background();
    result
}

async fn scenarios(
    args: &CyclesArgs,
    grpc: &LeaseholdClient<tonic::transport::Channel>,
    direct: &Store,
    direct_runtime: &tokio::runtime::Handle,
) -> Result<(), String> {
    println!(
        "{:<24} {:>12} {:>12} {:>7} {:>22} {:>22}",
        "scenario",
        "broker/s",
        "direct/s",
        "ratio",
        "broker p50/p99/p999 µs",
        "direct p50/p99/p999 µs"
    );
    for &workers in &args.workers {
        let broker = uncontended_broker(grpc, workers, args.duration).await?;
        let direct = direct_runtime
            .spawn(uncontended_direct(direct.clone(), workers, args.duration))
            .await
            .map_err(|e| e.to_string())??;
        let per_s = |r: &Run| r.cycles as f64 / args.duration.as_secs_f64();
        let tail = |r: &Run| {
            format!(
                "{}/{}/{}",
                r.percentile(0.5),
                r.percentile(0.99),
                r.percentile(0.999)
            )
        };
        println!(
            "{:<24} {:>12.0} {:>12.0} {:>7.2} {:>22} {:>22}",
            format!("uncontended, {workers} workers"),
            per_s(&broker),
            per_s(&direct),
            per_s(&broker) / per_s(&direct).max(1.0),
            tail(&broker),
            tail(&direct)
        );
    }
    if args.contended > 0 {
        contended(grpc, args.contended, args.duration).await?;
    }
    Ok(())
}

async fn uncontended_broker(
    grpc: &LeaseholdClient<tonic::transport::Channel>,
    workers: usize,
    duration: Duration,
) -> Result<Run, String> {
    let end = Instant::now() + duration;
    let mut tasks = Vec::new();
    for w in 0..workers {
        let mut grpc = grpc.clone();
        let name = format!("bench/cycles/{}/{workers}/{w}", std::process::id());
        tasks.push(tokio::spawn(async move {
            let mut run = Run::default();
            while Instant::now() < end {
                let started = Instant::now();
                let lease = grpc
                    .acquire(AcquireRequest {
                        name: name.clone(),
                        ttl_ms: 10_000,
                        ..Default::default()
                    })
                    .await
                    .map_err(|s| format!("acquire: {}", s.message()))?
                    .into_inner()
                    .lease
                    .ok_or("no lease")?;
                run.latencies_us.push(started.elapsed().as_micros() as u64);
                grpc.release(ReleaseRequest {
                    name: lease.name,
                    owner_token: lease.owner_token,
                })
                .await
                .map_err(|s| format!("release: {}", s.message()))?;
                run.cycles += 1;
            }
            Ok::<Run, String>(run)
        }));
    }
    merge(tasks).await
}

async fn uncontended_direct(
    store: Store,
    workers: usize,
    duration: Duration,
) -> Result<Run, String> {
    let end = Instant::now() + duration;
    let mut tasks = Vec::new();
    for w in 0..workers {
        let store = store.clone();
        let name = format!("bench/cycles/{}/{workers}/{w}", std::process::id());
        tasks.push(tokio::spawn(async move {
            let mut run = Run::default();
            while Instant::now() < end {
                let spec = GrantSpec {
                    name: name.clone(),
                    token: token::generate().map_err(|e| e.to_string())?,
                    holder: String::new(),
                    ttl_ms: 10_000,
                    lock_delay_ms: 0,
                    limit: 1,
                    queued: false,
                };
                let started = Instant::now();
                match store.acquire(&spec).await.map_err(|e| e.to_string())? {
                    Acquired::Granted { .. } => {}
                    blocked => return Err(format!("direct acquire refused: {blocked:?}")),
                }
                run.latencies_us.push(started.elapsed().as_micros() as u64);
                store
                    .release(&spec.name, &spec.token)
                    .await
                    .map_err(|e| e.to_string())?;
                run.cycles += 1;
            }
            Ok::<Run, String>(run)
        }));
    }
    merge(tasks).await
}

async fn merge(tasks: Vec<tokio::task::JoinHandle<Result<Run, String>>>) -> Result<Run, String> {
    let mut total = Run::default();
    for task in tasks {
        let run = task.await.map_err(|e| e.to_string())??;
        total.cycles += run.cycles;
        total.latencies_us.extend(run.latencies_us);
    }
    Ok(total)
}

/// `waiters` workers on one lock, each waiting for it, holding it for no
/// time and releasing it: handoffs per second, handoff latency (release to
/// the next grant) and fairness (fewest / most grants per worker).
async fn contended(
    grpc: &LeaseholdClient<tonic::transport::Channel>,
    waiters: usize,
    duration: Duration,
) -> Result<(), String> {
    let end = Instant::now() + duration;
    let name = format!("bench/contended/{}", std::process::id());
    let last_release: Arc<Mutex<Option<Instant>>> = Arc::default();
    let handoffs_us: Arc<Mutex<Vec<u64>>> = Arc::default();
    let mut tasks = Vec::new();
    for _ in 0..waiters {
        let (mut grpc, name) = (grpc.clone(), name.clone());
        let (last_release, handoffs_us) = (Arc::clone(&last_release), Arc::clone(&handoffs_us));
        tasks.push(tokio::spawn(async move {
            let mut grants = 0u64;
            while Instant::now() < end {
                let request = AcquireRequest {
                    name: name.clone(),
                    ttl_ms: 10_000,
                    wait_timeout_ms: 10_000,
                    ..Default::default()
                };
                let Ok(response) = grpc.acquire(request).await else {
                    continue;
                };
                let granted = Instant::now();
                let lease = response.into_inner().lease.ok_or("no lease")?;
                if let Some(released) = *last_release.lock().map_err(|e| e.to_string())? {
                    handoffs_us
                        .lock()
                        .map_err(|e| e.to_string())?
                        .push(granted.duration_since(released).as_micros() as u64);
                }
                grants += 1;
                *last_release.lock().map_err(|e| e.to_string())? = Some(Instant::now());
                grpc.release(ReleaseRequest {
                    name: lease.name,
                    owner_token: lease.owner_token,
                })
                .await
                .map_err(|s| format!("release: {}", s.message()))?;
            }
            Ok::<u64, String>(grants)
        }));
    }
    let mut grants = Vec::new();
    for task in tasks {
        grants.push(task.await.map_err(|e| e.to_string())??);
    }
    let run = Run {
        cycles: grants.iter().sum(),
        latencies_us: std::mem::take(&mut *handoffs_us.lock().map_err(|e| e.to_string())?),
    };
    let (min, max) = (
        grants.iter().min().copied().unwrap_or(0),
        grants.iter().max().copied().unwrap_or(0),
    );
    println!(
        "{:<24} {:>12.0} handoffs/s; handoff p50/p99 {}/{} µs; grants per worker min/max {min}/{max} ({:.2})",
        format!("one lock, {waiters} waiters"),
        run.cycles as f64 / duration.as_secs_f64(),
        run.percentile(0.5),
        run.percentile(0.99),
        min as f64 / max.max(1) as f64
    );
    Ok(())
}
