//! `leasehold-bench list`: what one page of `List` costs, and a whole walk,
//! at N held names (docs/stores.md "Listing", BENCHMARKS.md "List and the
//! census").
//!
//! Fills the store with N held names through a broker of the bench's own
//! (unary acquires, many in flight, a TTL of an hour: what any client's
//! grants write), started with `--census-interval 0` so that no census
//! walks beside the measurements. Then, `--runs` times each, after one
//! unmeasured call of the same kind: one page of 100 and of 1000 from the
//! start of the walk and from its middle (a token past half the names
//! whose page is as full as the first: [`middle_token`]), and a whole walk in pages of
//! 1000. Each is timed in the broker (the wall time of the gRPC call, from this client)
//! and, where the store can tell, in the store: Redis's `INFO
//! commandstats` (µs of `SCAN`, and of `FCALL`/`EVALSHA`: the describes),
//! reset with `CONFIG RESETSTAT` before each call; PostgreSQL's
//! pg_stat_statements (the `list()` statements' execution time), when the
//! server preloads it; etcd tells none. Last, a broker with the census on
//! (`--census-interval`, a `--census-max-names` above N) takes `--runs`
//! censuses of the same names: `leasehold_census_duration_seconds` from its
//! /metrics, and the store's time between two censuses (the walk, and the
//! taker lease's renewals). The names are released at the end.

use std::{
    collections::HashSet,
    process::ExitCode,
    time::{Duration, Instant},
};

use futures_util::StreamExt;
use leasehold_proto::{AcquireRequest, ListRequest, ReleaseRequest};
use leasehold_server::duration::parse_duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::{
    broker::{start_broker, BenchClient, OwnBroker},
    stats::millis,
    EXIT_BROKER_ERROR,
};

/// Arguments of `bench list`.
#[derive(clap::Args, Debug)]
pub struct ListArgs {
    /// Store URL (Redis, PostgreSQL or etcd) the brokers run on.
    #[arg(long)]
    store: String,
    /// Held names to fill the store with: 100,000 by default; 20,000 on
    /// etcd (a lease per name, granted at about a thousand a second
    /// through the broker on a 2-core machine, and a walk of some seconds).
    #[arg(long)]
    names: Option<usize>,
    /// Runs of each measurement (min / median / max over them).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Acquires in flight while filling.
    #[arg(long, default_value_t = 128)]
    fill_parallel: usize,
    /// `--census-interval` of the census broker (0: no census run).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    census_interval: Duration,
    /// `--census-max-names` of the census broker: by default 4 N (at least
    /// 100,000), above the names a walk of N looks at, so that each census
    /// is complete (the census counts a page as 1000 names looked at, and a
    /// Redis page lists fewer).
    #[arg(long)]
    census_max_names: Option<usize>,
}

/// Runs the scenario; see the module doc.
pub async fn list(args: ListArgs) -> ExitCode {
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("leasehold-bench list: {e}");
            ExitCode::from(EXIT_BROKER_ERROR)
        }
    }
}

/// The TTL of the filled names: the broker's longest by default, so that
/// none expires during a run.
const FILL_TTL: Duration = Duration::from_secs(3600);

/// The biggest page List serves.
const MAX_PAGE: u32 = 1000;

/// Where the store's own time for the listing is read.
enum StoreClock {
    /// `INFO commandstats`, reset by `CONFIG RESETSTAT`.
    Redis(redis::aio::MultiplexedConnection),
    /// pg_stat_statements, reset by `pg_stat_statements_reset()`.
    Postgres(tokio_postgres::Client),
    /// The store tells nothing (etcd, or what the clock could not read).
    None,
}

/// The store's time since the last reset, in µs, by part (Redis: SCAN
/// and the describes; PostgreSQL: the list() statements).
type StoreTime = Vec<(&'static str, f64)>;

impl StoreClock {
    async fn connect(url: &str) -> Result<(StoreClock, &'static str), String> {
        if crate::plain::PlainLock::supports(url) {
            let conn = redis::Client::open(url)
                .map_err(|e| format!("bad Redis URL: {e}"))?
                .get_multiplexed_async_connection()
                .await
                .map_err(|e| format!("cannot reach Redis: {e}"))?;
            return Ok((StoreClock::Redis(conn), "Redis"));
        }
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let client = crate::probe::postgres_client(url).await?;
            let ready = client
                .batch_execute(
                    "CREATE EXTENSION IF NOT EXISTS pg_stat_statements; \
                     SELECT pg_stat_statements_reset()",
                )
                .await;
            return Ok(match ready {
                Ok(()) => (StoreClock::Postgres(client), "PostgreSQL"),
                Err(e) => {
                    println!(
                        "PostgreSQL's time not read (pg_stat_statements: {}; it needs \
                         shared_preload_libraries = pg_stat_statements)",
                        e.as_db_error()
                            .map_or(e.to_string(), |d| d.message().into())
                    );
                    (StoreClock::None, "PostgreSQL")
                }
            });
        }
        if url.starts_with("etcd://") || url.starts_with("etcds://") {
            return Ok((StoreClock::None, "etcd"));
        }
        Ok((StoreClock::None, "store"))
    }

    async fn reset(&mut self) -> Result<(), String> {
        match self {
            StoreClock::Redis(conn) => redis::cmd("CONFIG")
                .arg("RESETSTAT")
                .query_async::<()>(conn)
                .await
                .map_err(|e| format!("CONFIG RESETSTAT: {e}")),
            StoreClock::Postgres(client) => client
                .batch_execute("SELECT pg_stat_statements_reset()")
                .await
                .map_err(|e| format!("pg_stat_statements_reset: {e}")),
            StoreClock::None => Ok(()),
        }
    }

    async fn read(&mut self) -> Result<Option<StoreTime>, String> {
        match self {
            StoreClock::Redis(conn) => {
                let info: String = redis::cmd("INFO")
                    .arg("commandstats")
                    .query_async(conn)
                    .await
                    .map_err(|e| format!("INFO commandstats: {e}"))?;
                let usec = |command: &str| -> f64 {
                    info.lines()
                        .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:")))
                        .and_then(|rest| {
                            rest.split(',')
                                .find_map(|f| f.strip_prefix("usec="))
                                .and_then(|n| n.parse().ok())
                        })
                        .unwrap_or(0.0)
                };
                Ok(Some(vec![
                    ("SCAN", usec("scan")),
                    (
                        "describes",
                        usec("fcall") + usec("fcall_ro") + usec("evalsha"),
                    ),
                ]))
            }
            StoreClock::Postgres(client) => {
                let row = client
                    .query_one(
                        "SELECT coalesce(sum(total_exec_time), 0)::float8 \
                         FROM pg_stat_statements WHERE query LIKE '%.list(%'",
                        &[],
                    )
                    .await
                    .map_err(|e| format!("pg_stat_statements: {e}"))?;
                let ms: f64 = row.get(0);
                Ok(Some(vec![("list()", ms * 1e3)]))
            }
            StoreClock::None => Ok(None),
        }
    }
}

/// One measured call (or walk).
struct Sample {
    wall_us: f64,
    store: Option<StoreTime>,
    /// Entries listed (a page), or distinct names (a walk).
    listed: usize,
    /// Pages (a walk).
    pages: usize,
}

async fn run(args: ListArgs) -> Result<(), String> {
    let (mut clock, store) = StoreClock::connect(&args.store).await?;
    let n = args
        .names
        .unwrap_or(if store == "etcd" { 20_000 } else { 100_000 });
    let runs = args.runs.max(1);
    let prefix = format!("list{}:", std::process::id());
    let broker = start_broker(&args.store, &["--census-interval", "0"], &prefix).await?;

    let started = Instant::now();
    let tokens = fill(&broker.grpc, n, args.fill_parallel).await?;
    let took = started.elapsed().as_secs_f64();
    println!(
        "list: {n} names held on {store}, filled through the broker in {took:.1} s \
         ({:.0} acquires/s); {runs} runs each, min / median / max",
        n as f64 / took.max(1e-9)
    );

    let mut grpc = broker.grpc.clone();
    for size in [100, MAX_PAGE] {
        let middle = middle_token(&mut grpc, n, size).await?;
        for (from, token) in [("first", ""), ("middle", middle.as_str())] {
            // One call unmeasured: a warm-up.
            page(&mut grpc, &mut clock, size, token).await?;
            let mut samples = Vec::with_capacity(runs);
            for _ in 0..runs {
                samples.push(page(&mut grpc, &mut clock, size, token).await?);
            }
            print_pages(&format!("page of {size}, {from}:"), store, &samples);
        }
    }
    let mut walks = Vec::with_capacity(runs);
    for _ in 0..runs {
        walks.push(walk(&mut grpc, &mut clock).await?);
    }
    print_walks(store, &walks);
    let census_broker = if args.census_interval.is_zero() {
        None
    } else {
        drop(broker);
        Some(census(&args, &prefix, n, runs, store, &mut clock).await?)
    };

    // The names released, through whichever broker still runs.
    let mut releaser = match &census_broker {
        Some(b) => b.grpc.clone(),
        None => grpc,
    };
    release(&mut releaser, tokens, args.fill_parallel).await;
    Ok(())
}

/// Acquires `list/<i>` for i in 0..n, `parallel` in flight; their tokens.
async fn fill(
    grpc: &BenchClient,
    n: usize,
    parallel: usize,
) -> Result<Vec<(String, String)>, String> {
    let calls = (0..n).map(|i| {
        let mut grpc = grpc.clone();
        let request = AcquireRequest {
            name: format!("list/{i:07}"),
            ttl_ms: millis(FILL_TTL),
            holder: format!("bench-{i}"),
            ..Default::default()
        };
        async move {
            let lease = grpc
                .acquire(request)
                .await
                .map_err(|s| format!("acquire: {}", s.message()))?
                .into_inner()
                .lease
                .ok_or("acquire: no lease")?;
            Ok::<_, String>((lease.name, lease.owner_token))
        }
    });
    futures_util::stream::iter(calls)
        .buffer_unordered(parallel.max(1))
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect()
}

/// Releases what [`fill`] took (errors ignored: the TTL ends them anyway).
async fn release(grpc: &mut BenchClient, tokens: Vec<(String, String)>, parallel: usize) {
    let calls = tokens.into_iter().map(|(name, owner_token)| {
        let mut grpc = grpc.clone();
        async move {
            let _ = grpc.release(ReleaseRequest { name, owner_token }).await;
        }
    });
    futures_util::stream::iter(calls)
        .buffer_unordered(parallel.max(1))
        .collect::<Vec<()>>()
        .await;
}

/// One List call.
async fn call(
    grpc: &mut BenchClient,
    size: u32,
    token: &str,
) -> Result<leasehold_proto::ListResponse, String> {
    Ok(grpc
        .list(ListRequest {
            page_size: size,
            page_token: token.to_owned(),
            ..Default::default()
        })
        .await
        .map_err(|s| format!("list: {}", s.message()))?
        .into_inner())
}

/// A token from the middle of the walk in pages of `size`: the first one
/// past half the names whose page is (nearly) full, at least nine tenths
/// of what the walk's first page listed (on Redis a token may resume a
/// SCAN batch listed in part, whose page holds only that batch's rest: not
/// a page's cost; on etcd a page of `size` keys holds about half as many
/// names, a lease key and a record key each). Empty if the walk ends
/// first (a walk of one page).
async fn middle_token(grpc: &mut BenchClient, n: usize, size: u32) -> Result<String, String> {
    let (mut token, mut seen, mut first) = (String::new(), HashSet::new(), None);
    loop {
        let page = call(grpc, size, &token).await?;
        let listed = page.locks.len();
        let full = listed * 10 >= *first.get_or_insert(listed) * 9;
        if seen.len() >= n / 2 && full {
            return Ok(token);
        }
        seen.extend(page.locks.into_iter().map(|l| l.name));
        if page.next_page_token.is_empty() {
            return Ok(String::new());
        }
        token = page.next_page_token;
    }
}

/// One page of `size` from `token`, timed.
async fn page(
    grpc: &mut BenchClient,
    clock: &mut StoreClock,
    size: u32,
    token: &str,
) -> Result<Sample, String> {
    clock.reset().await?;
    let began = Instant::now();
    let page = call(grpc, size, token).await?;
    let wall_us = began.elapsed().as_secs_f64() * 1e6;
    Ok(Sample {
        wall_us,
        store: clock.read().await?,
        listed: page.locks.len(),
        pages: 1,
    })
}

/// A whole walk in pages of 1000, timed.
async fn walk(grpc: &mut BenchClient, clock: &mut StoreClock) -> Result<Sample, String> {
    clock.reset().await?;
    let (mut token, mut seen, mut pages) = (String::new(), HashSet::new(), 0);
    let began = Instant::now();
    loop {
        let page = call(grpc, MAX_PAGE, &token).await?;
        pages += 1;
        seen.extend(page.locks.into_iter().map(|l| l.name));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    let wall_us = began.elapsed().as_secs_f64() * 1e6;
    Ok(Sample {
        wall_us,
        store: clock.read().await?,
        listed: seen.len(),
        pages,
    })
}

/// A broker with the census on takes `runs` censuses of the names under
/// `prefix`: their durations from /metrics and the store's time for each
/// (reset after each census, read after the next). Returns the broker
/// (the names are released through it).
async fn census(
    args: &ListArgs,
    prefix: &str,
    n: usize,
    runs: usize,
    store: &str,
    clock: &mut StoreClock,
) -> Result<OwnBroker, String> {
    let interval = format!("{}ms", args.census_interval.as_millis());
    let max_names = args
        .census_max_names
        .unwrap_or_else(|| n.saturating_mul(4).max(100_000))
        .to_string();
    clock.reset().await?;
    let broker = start_broker(
        &args.store,
        &[
            "--census-interval",
            &interval,
            "--census-max-names",
            &max_names,
        ],
        prefix,
    )
    .await?;
    let (mut last, mut samples, mut complete) = (0.0, Vec::with_capacity(runs), 0);
    // A census waits nine times its duration before the next: a generous
    // bound for `runs` of them.
    let deadline = Instant::now() + Duration::from_secs(120) * u32::try_from(runs).unwrap_or(3);
    while samples.len() < runs {
        if Instant::now() > deadline {
            return Err(format!("{} of {runs} censuses seen in time", samples.len()));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let Ok(text) = metrics(broker.metrics).await else {
            continue;
        };
        let timestamp = gauge(&text, "leasehold_census_timestamp_seconds").unwrap_or(0.0);
        if timestamp <= last {
            continue;
        }
        last = timestamp;
        let store_time = clock.read().await?;
        clock.reset().await?;
        complete += usize::from(gauge(&text, "leasehold_census_complete") == Some(1.0));
        samples.push(Sample {
            wall_us: gauge(&text, "leasehold_census_duration_seconds").unwrap_or(0.0) * 1e6,
            store: store_time,
            listed: 0,
            pages: 0,
        });
    }
    let mut durations: Vec<f64> = samples.iter().map(|s| s.wall_us / 1e6).collect();
    println!(
        "census every {interval}: {} s (leasehold_census_duration_seconds); complete {complete} \
         of {runs}; {}",
        mmm(&mut durations, 2),
        store_times(store, &samples, 1e3, "ms"),
    );
    Ok(broker)
}

/// The broker's /metrics text.
async fn metrics(at: std::net::SocketAddr) -> Result<String, String> {
    let mut stream = tokio::net::TcpStream::connect(at)
        .await
        .map_err(|e| e.to_string())?;
    stream
        .write_all(
            format!("GET /metrics HTTP/1.1\r\nHost: {at}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .map_err(|e| e.to_string())?;
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .await
        .map_err(|e| e.to_string())?;
    Ok(answer)
}

/// The value of an unlabelled gauge in a /metrics text.
fn gauge(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// `min / median / max` of `values`, `decimals` after the point.
fn mmm(values: &mut [f64], decimals: usize) -> String {
    if values.is_empty() {
        return "-".into();
    }
    values.sort_by(f64::total_cmp);
    let (min, median, max) = (
        values[0],
        values[values.len() / 2],
        values[values.len() - 1],
    );
    format!("{min:.decimals$} / {median:.decimals$} / {max:.decimals$}")
}

/// The store's time of the samples, part by part, in `unit` (µs divided
/// by `scale`); "<store> time not read" where it tells none.
fn store_times(store: &str, samples: &[Sample], scale: f64, unit: &str) -> String {
    let Some(Some(first)) = samples.first().map(|s| s.store.as_ref()) else {
        return format!("{store} time not read");
    };
    let parts: Vec<String> = first
        .iter()
        .enumerate()
        .map(|(i, (part, _))| {
            let mut values: Vec<f64> = samples
                .iter()
                .filter_map(|s| s.store.as_ref().map(|t| t[i].1 / scale))
                .collect();
            format!("{part} {} {unit}", mmm(&mut values, 2))
        })
        .collect();
    format!("{store} {}", parts.join(", "))
}

fn print_pages(label: &str, store: &str, samples: &[Sample]) {
    let mut wall: Vec<f64> = samples.iter().map(|s| s.wall_us / 1e3).collect();
    let mut listed: Vec<f64> = samples.iter().map(|s| s.listed as f64).collect();
    println!(
        "{label:<22} broker {} ms; {}; {} entries",
        mmm(&mut wall, 2),
        store_times(store, samples, 1e3, "ms"),
        mmm(&mut listed, 0),
    );
}

fn print_walks(store: &str, samples: &[Sample]) {
    let mut wall: Vec<f64> = samples.iter().map(|s| s.wall_us / 1e6).collect();
    let mut pages: Vec<f64> = samples.iter().map(|s| s.pages as f64).collect();
    let mut names: Vec<f64> = samples.iter().map(|s| s.listed as f64).collect();
    println!(
        "walk in pages of 1000: {} s; {} pages; {} distinct names; {}",
        mmm(&mut wall, 2),
        mmm(&mut pages, 0),
        mmm(&mut names, 0),
        store_times(store, samples, 1e3, "ms"),
    );
}
