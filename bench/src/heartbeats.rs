//! `leasehold-bench heartbeats`: N leases kept alive over S KeepAlive streams
//! through a broker of the bench's own and, in the same run, renewed straight
//! against the store with the same scripts and batching (one pipeline per
//! stream's share, the floor), each for the same time. Reports the renewal
//! round trip p50/p99, leases lost, and the CPU and memory of broker and
//! store (Redis, PostgreSQL, etcd or ZooKeeper: see `probe`).
//!
//! With `--etcd URL`, a third row per lease count: as many etcd leases (the
//! same TTL) kept alive over as many `LeaseKeepAlive` streams, a heartbeat
//! per stream per interval (see `etcd::keep_alive_share`: etcd renews one
//! lease per request, so a heartbeat is a request per lease), with etcd's
//! CPU and RSS in the store's columns (etcd is its own store) when it runs
//! on this machine, and its keep-alives per second at the end of the row.

use std::{
    process::ExitCode,
    sync::{atomic::Ordering, Arc},
    time::{Duration, Instant},
};

use leasehold_proto::{KeepAliveRequest, LeaseRef, ReleaseRequest};
use leasehold_server::{
    duration::parse_duration,
    lease::token,
    store::{Acquired, Checked, GrantSpec, RenewItem, Store},
};

use crate::{
    broker::{direct_store, start_broker, OwnBroker},
    probe::{cpu_seconds, Memory, Probe},
    soak::{acquire_many, rss_mib, stagger, stream, Heartbeats, Tally},
    stats::{micros, millis, percentile},
    EXIT_BROKER_ERROR,
};

/// Arguments of `bench heartbeats`.
#[derive(clap::Args, Debug)]
pub struct HeartbeatsArgs {
    /// Store URL (Redis, PostgreSQL, etcd or ZooKeeper): the broker under test
    /// runs on it, and the direct baseline talks to it.
    #[arg(long)]
    store: String,
    /// Lease counts, one run each (comma-separated).
    #[arg(long, default_value = "10000,100000", value_delimiter = ',')]
    leases: Vec<usize>,
    /// KeepAlive streams the leases are spread over (direct: batches).
    #[arg(long, default_value_t = 100)]
    streams: usize,
    /// Time between two heartbeats of a stream.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    interval: Duration,
    /// Lease TTL.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    ttl: Duration,
    /// How long each side keeps its leases alive, per run.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    duration: Duration,
    /// `--worker-threads` of the broker under test (0: one per core).
    #[arg(long, default_value_t = 1)]
    broker_worker_threads: usize,
    /// How the broker side's streams carry their heartbeats: KeepAlive
    /// streams, or Session streams (the clients' default), the heartbeats as
    /// their messages.
    #[arg(long, value_enum, default_value_t = Heartbeats::Keepalive)]
    heartbeats: Heartbeats,
    /// An etcd endpoint (e.g. `http://127.0.0.1:2379`): keep as many etcd
    /// leases alive over as many LeaseKeepAlive streams too (a row "etcd").
    #[arg(long)]
    etcd: Option<String>,
}

/// Runs the scenario; see the module doc.
pub async fn heartbeats(args: HeartbeatsArgs) -> ExitCode {
    match run(args).await {
        Ok(0) => ExitCode::SUCCESS,
        Ok(_) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("leasehold-bench heartbeats: {e}");
            ExitCode::from(EXIT_BROKER_ERROR)
        }
    }
}

/// What one side measured.
struct Measured {
    rtts_us: Vec<u64>,
    lost: u64,
    broker_rss_mib: Option<(f64, f64)>,
    broker_cpu: Option<f64>,
    /// The store's CPU (a fraction of a core), when it can be read.
    store_cpu: Option<f64>,
    /// The store's peak memory, when it can be read: Redis's whole server
    /// (RSS and data), PostgreSQL's tables of this side's schema (data: see
    /// `Probe::memory`), etcd's or ZooKeeper's RSS.
    store_rss_mib: Option<f64>,
    store_data_mib: Option<f64>,
    /// Leases renewed per second (etcd's row only: one request each).
    keepalives_per_s: Option<f64>,
}

impl Measured {
    /// A side's figures with the peak of the store's memory samples.
    fn store_memory(mut self, memory: Option<Memory>) -> Self {
        self.store_rss_mib = memory.and_then(|m| m.rss_mib);
        self.store_data_mib = memory.and_then(|m| m.data_mib);
        self
    }
}

async fn run(args: HeartbeatsArgs) -> Result<u64, String> {
    let most = args.leases.iter().copied().max().unwrap_or(1);
    let per_stream = most.div_ceil(args.streams.max(1)).max(1).to_string();
    let threads = args.broker_worker_threads.to_string();
    let prefix = format!("beats{}:", std::process::id());
    let broker = start_broker(
        &args.store,
        &[
            "--max-stream-leases",
            &per_stream,
            "--worker-threads",
            &threads,
        ],
        &prefix,
    )
    .await?;
    let probe = Probe::connect(&args.store).await?;
    let store = probe.as_ref().map_or("store", Probe::store);
    // The direct side on its own thread-per-core runtime, as in `cycles`.
    let prefixes = Prefixes {
        direct: format!("{prefix}d:"),
        broker: prefix,
    };
    let (direct_runtime, direct) = direct_store(&args.store, &prefixes.direct)?;
    let etcd = match &args.etcd {
        Some(url) => Some((
            crate::etcd::Etcd::connect(url).await?,
            crate::etcd::local_pid(url),
        )),
        None => None,
    };
    let over = match args.heartbeats {
        Heartbeats::Keepalive => "KeepAlive",
        Heartbeats::Session => "Session",
    };
    println!(
        "{} {over} streams, a heartbeat each every {:?}, TTL {:?}, {:?} per side, on {store}",
        args.streams, args.interval, args.ttl, args.duration
    );
    if let Some((_, pid)) = &etcd {
        println!(
            "etcd: a LeaseKeepAlive request per lease; its row's {store} columns are etcd's \
             own ({}), keep-alives/s at its end",
            if pid.is_some() {
                "CPU and RSS"
            } else {
                "not read: it does not run here"
            }
        );
    }
    let widths = Widths::for_store(store);
    println!(
        "{:>7} {:<7} {:>17} {:>6} {:>18} {:>10} {:>cpu$} {:>rss$} {:>data$}",
        "leases",
        "side",
        "renewal p50/p99",
        "lost",
        "broker RSS MiB",
        "broker CPU",
        format!("{store} CPU"),
        format!("{store} RSS MiB"),
        format!("{store} data"),
        cpu = widths.cpu,
        rss = widths.rss,
        data = widths.data,
    );
    let outcome = measure(
        &args,
        &broker,
        probe.as_ref(),
        &prefixes,
        &direct,
        direct_runtime.handle(),
        etcd.as_ref(),
    )
    .await;
    // Dropping a runtime may block; not allowed inside this one.
    direct_runtime.shutdown_background();
    outcome
}

/// The key prefixes of the two sides (on PostgreSQL: a schema each).
struct Prefixes {
    broker: String,
    direct: String,
}

/// The widths of the store's columns, wide enough for their headers.
struct Widths {
    cpu: usize,
    rss: usize,
    data: usize,
}

impl Widths {
    fn for_store(store: &str) -> Self {
        Widths {
            cpu: (store.len() + 4).max(10),
            rss: (store.len() + 8).max(15),
            data: (store.len() + 5).max(12),
        }
    }
}

/// Both sides (and etcd's, with `--etcd`) for each lease count, a row
/// each; the leases lost in all.
async fn measure(
    args: &HeartbeatsArgs,
    broker: &OwnBroker,
    probe: Option<&Probe>,
    prefixes: &Prefixes,
    direct: &Store,
    direct_runtime: &tokio::runtime::Handle,
    etcd: Option<&(crate::etcd::Etcd, Option<u32>)>,
) -> Result<u64, String> {
    let widths = Widths::for_store(probe.map_or("store", Probe::store));
    let mut lost = 0;
    for &n in &args.leases {
        let through = through_broker(args, broker, probe, &prefixes.broker, n).await?;
        let floor = direct_runtime
            .spawn(direct_side(
                args.clone_shape(),
                direct.clone(),
                probe.cloned(),
                prefixes.direct.clone(),
                n,
            ))
            .await
            .map_err(|e| e.to_string())??;
        let mut rows = vec![("broker", through), ("direct", floor)];
        if let Some((etcd, pid)) = etcd {
            rows.push(("etcd", etcd_side(args.clone_shape(), etcd, *pid, n).await?));
        }
        for (side, m) in rows {
            lost += m.lost;
            print_row(n, side, m, &widths);
        }
    }
    Ok(lost)
}

/// One row of the table (`-` for a figure the side does not have).
fn print_row(n: usize, side: &str, mut m: Measured, widths: &Widths) {
    let percent = |c: Option<f64>| c.map_or("-".into(), |c| format!("{:.0}%", c * 100.0));
    println!(
        "{:>7} {:<7} {:>17} {:>6} {:>18} {:>10} {:>cpu$} {:>rss$} {:>data$}{}",
        n,
        side,
        format!(
            "{:.2}/{:.2} ms",
            percentile(&mut m.rtts_us, 0.5) as f64 / 1e3,
            percentile(&mut m.rtts_us, 0.99) as f64 / 1e3
        ),
        m.lost,
        m.broker_rss_mib.map_or("-".into(), |(start, peak)| format!(
            "{start:.1} -> {peak:.1}"
        )),
        percent(m.broker_cpu),
        percent(m.store_cpu),
        m.store_rss_mib
            .map_or("-".into(), |rss| format!("{rss:.1}")),
        m.store_data_mib
            .map_or("-".into(), |data| format!("{data:.1} MiB")),
        m.keepalives_per_s
            .map_or(String::new(), |k| format!(" {k:>9.0} keep-alives/s")),
        cpu = widths.cpu,
        rss = widths.rss,
        data = widths.data,
    );
}

impl HeartbeatsArgs {
    /// The settings the direct side needs (a copy it can own).
    fn clone_shape(&self) -> Shape {
        Shape {
            streams: self.streams.max(1),
            interval: self.interval,
            ttl: self.ttl,
            duration: self.duration,
        }
    }
}

#[derive(Clone, Copy)]
struct Shape {
    streams: usize,
    interval: Duration,
    ttl: Duration,
    duration: Duration,
}

/// The store's CPU seconds so far, if they can be read.
async fn store_cpu(probe: Option<&Probe>) -> Result<Option<f64>, String> {
    match probe {
        Some(probe) => probe.cpu_seconds().await,
        None => Ok(None),
    }
}

/// The store's memory now, its peak with `peak`.
async fn store_memory(
    probe: Option<&Probe>,
    prefix: &str,
    peak: Option<Memory>,
) -> Result<Option<Memory>, String> {
    Ok(match probe {
        Some(probe) => {
            let now = probe.memory(prefix).await?;
            Some(peak.map_or(now, |peak| peak.max(now)))
        }
        None => None,
    })
}

/// CPU used between two readings, as a fraction of a core over `elapsed`.
fn share(before: Option<f64>, after: Option<f64>, elapsed: f64) -> Option<f64> {
    Some((after? - before?) / elapsed)
}

async fn through_broker(
    args: &HeartbeatsArgs,
    broker: &OwnBroker,
    probe: Option<&Probe>,
    prefix: &str,
    n: usize,
) -> Result<Measured, String> {
    let pid = broker.child.id().ok_or("the broker exited")?;
    let run = format!("{}/{n}", std::process::id());
    let names = (0..n).map(|i| format!("beats/{run}/{i}"));
    let refs = acquire_many(&broker.grpc, names, args.ttl, "bench").await?;

    let tally = Arc::new(Tally::default());
    let cpu_before = store_cpu(probe).await?;
    let broker_cpu_before = cpu_seconds(pid);
    let rss_start = rss_mib(pid);
    let started = Instant::now();
    let end = started + args.duration;
    let per_stream = n.div_ceil(args.streams.max(1)).max(1);
    let shares: Vec<Vec<LeaseRef>> = refs.chunks(per_stream).map(<[LeaseRef]>::to_vec).collect();
    let count = shares.len();
    let mut tasks = Vec::new();
    for (i, share) in shares.iter().enumerate() {
        let offset = stagger(args.interval, i, count);
        tasks.push(tokio::spawn(stream(
            broker.grpc.clone(),
            args.heartbeats,
            share.clone(),
            args.interval,
            offset,
            end,
            Arc::clone(&tally),
        )));
    }
    let mut peak = rss_start;
    let mut memory = None;
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_secs(1)).await;
        peak = peak.max(rss_mib(pid));
        memory = store_memory(probe, prefix, memory).await?;
    }
    let mut links = Vec::with_capacity(tasks.len());
    for task in tasks {
        links.push(task.await.ok().flatten());
    }
    let elapsed = started.elapsed().as_secs_f64();
    let broker_cpu = (cpu_seconds(pid) - broker_cpu_before) / elapsed;
    let cpu_after = store_cpu(probe).await?;

    for chunk in refs.chunks(64) {
        let calls = chunk.iter().map(|r| {
            let mut grpc = broker.grpc.clone();
            let request = ReleaseRequest {
                name: r.name.clone(),
                owner_token: r.owner_token.clone(),
            };
            async move { grpc.release(request).await }
        });
        futures_util::future::join_all(calls).await;
    }
    // One last heartbeat per stream, before it ends: it finds its leases
    // released, so the broker keeps none of them to look at past their TTL.
    // Those looks (one store call per lease, when the stream ends holding
    // them) fell in the direct side's measurement that follows and made its
    // store CPU about twice the broker side's.
    let last = links
        .into_iter()
        .zip(shares)
        .map(|(link, leases)| async move {
            if let Some(mut link) = link {
                let _ = link
                    .beat(KeepAliveRequest {
                        seq: u64::MAX,
                        leases,
                        ..Default::default()
                    })
                    .await;
            }
        });
    futures_util::future::join_all(last).await;
    let rtts_us = std::mem::take(
        &mut *tally
            .rtts_us
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    Ok(Measured {
        rtts_us,
        lost: tally.lost.load(Ordering::Relaxed),
        broker_rss_mib: Some((rss_start, peak)),
        broker_cpu: Some(broker_cpu),
        store_cpu: share(cpu_before, cpu_after, elapsed),
        store_rss_mib: None,
        store_data_mib: None,
        keepalives_per_s: None,
    }
    .store_memory(memory))
}

/// The floor: the same leases renewed by the store layer itself, one
/// pipeline per share every interval, shares spread over the interval.
async fn direct_side(
    shape: Shape,
    store: Store,
    probe: Option<Probe>,
    prefix: String,
    n: usize,
) -> Result<Measured, String> {
    let probe = probe.as_ref();
    let run = format!("{}/{n}", std::process::id());
    let ttl_ms = millis(shape.ttl);
    let mut items = Vec::with_capacity(n);
    for chunk in (0..n).collect::<Vec<_>>().chunks(64) {
        let mut specs = Vec::new();
        for i in chunk {
            specs.push(GrantSpec {
                name: format!("beats/{run}/{i}"),
                token: token::generate().map_err(|e| e.to_string())?,
                holder: "bench".into(),
                ttl_ms,
                lock_delay_ms: 0,
                limit: 1,
                queued: false,
            });
        }
        let grants = futures_util::future::join_all(specs.iter().map(|s| store.acquire(s))).await;
        for (spec, granted) in specs.into_iter().zip(grants) {
            match granted.map_err(|e| e.to_string())? {
                Acquired::Granted { .. } => items.push(RenewItem {
                    name: spec.name,
                    token: spec.token,
                    ttl_ms: None,
                }),
                blocked @ Acquired::Blocked(_) => {
                    return Err(format!("direct acquire refused: {blocked:?}"))
                }
            }
        }
    }

    let cpu_before = store_cpu(probe).await?;
    let started = Instant::now();
    let end = started + shape.duration;
    let per_batch = n.div_ceil(shape.streams).max(1);
    let batches: Vec<Vec<RenewItem>> = items.chunks(per_batch).map(<[RenewItem]>::to_vec).collect();
    let count = batches.len();
    let tally = Arc::new(Tally::default());
    let mut tasks = Vec::new();
    for (i, batch) in batches.into_iter().enumerate() {
        let (store, tally) = (store.clone(), Arc::clone(&tally));
        let offset = stagger(shape.interval, i, count);
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep(offset).await;
            let mut tick = tokio::time::interval(shape.interval);
            while Instant::now() < end {
                tick.tick().await;
                let sent = Instant::now();
                match store.renew_many(&batch).await {
                    Ok(outcomes) => {
                        let rtt = micros(sent.elapsed());
                        let lost = outcomes
                            .iter()
                            .filter(|o| !matches!(o, Checked::Done(_)))
                            .count();
                        tally.lost.fetch_add(lost as u64, Ordering::Relaxed);
                        tally.heartbeats.fetch_add(1, Ordering::Relaxed);
                        if let Ok(mut rtts) = tally.rtts_us.lock() {
                            rtts.push(rtt);
                        }
                    }
                    Err(_) => {
                        tally.lost.fetch_add(batch.len() as u64, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    let mut memory = None;
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_secs(1)).await;
        memory = store_memory(probe, &prefix, memory).await?;
    }
    for task in tasks {
        let _ = task.await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let cpu_after = store_cpu(probe).await?;
    for chunk in items.chunks(64) {
        futures_util::future::join_all(chunk.iter().map(|i| store.release(&i.name, &i.token)))
            .await;
    }
    let rtts_us = std::mem::take(
        &mut *tally
            .rtts_us
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    Ok(Measured {
        rtts_us,
        lost: tally.lost.load(Ordering::Relaxed),
        broker_rss_mib: None,
        broker_cpu: None,
        store_cpu: share(cpu_before, cpu_after, elapsed),
        store_rss_mib: None,
        store_data_mib: None,
        keepalives_per_s: None,
    }
    .store_memory(memory))
}

/// etcd's row: `n` etcd leases of the same TTL kept alive over as many
/// `LeaseKeepAlive` streams as the broker's, spread over the interval as
/// its streams are; etcd's CPU and peak RSS from /proc when `pid` (it runs
/// here). The leases are revoked afterwards.
async fn etcd_side(
    shape: Shape,
    etcd: &crate::etcd::Etcd,
    pid: Option<u32>,
    n: usize,
) -> Result<Measured, String> {
    let leases = crate::etcd::grant_many(etcd, n, shape.ttl).await?;
    let tally = Arc::new(Tally::default());
    let cpu_before = pid.map(cpu_seconds);
    let started = Instant::now();
    let end = started + shape.duration;
    let per_stream = n.div_ceil(shape.streams).max(1);
    let shares: Vec<Vec<i64>> = leases.chunks(per_stream).map(<[i64]>::to_vec).collect();
    let count = shares.len();
    let mut tasks = Vec::new();
    for (i, share) in shares.into_iter().enumerate() {
        let offset = stagger(shape.interval, i, count);
        tasks.push(tokio::spawn(crate::etcd::keep_alive_share(
            etcd.clone(),
            share,
            shape.interval,
            offset,
            end,
            Arc::clone(&tally),
        )));
    }
    let mut peak = pid.map(rss_mib);
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if let Some(pid) = pid {
            peak = Some(peak.unwrap_or(0.0).max(rss_mib(pid)));
        }
    }
    let mut renewed = 0;
    for task in tasks {
        renewed += task.await.unwrap_or(0);
    }
    let elapsed = started.elapsed().as_secs_f64();
    let cpu_after = pid.map(cpu_seconds);
    crate::etcd::revoke_many(etcd, &leases).await;
    let rtts_us = std::mem::take(
        &mut *tally
            .rtts_us
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    Ok(Measured {
        rtts_us,
        lost: tally.lost.load(Ordering::Relaxed),
        broker_rss_mib: None,
        broker_cpu: None,
        store_cpu: share(cpu_before, cpu_after, elapsed),
        store_rss_mib: peak,
        store_data_mib: None,
        keepalives_per_s: Some(renewed as f64 / elapsed),
    })
}
