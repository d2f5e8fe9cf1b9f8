//! `leasehold-bench cycles`: acquire+release cycles through a broker of the
//! bench's own and, in the same run, straight against Redis with the same Lua
//! scripts (the store layer the broker uses: the floor no broker can beat),
//! and with a plain Redis lock as a user writes it by hand (`plain`: not the
//! broker's scripts); then one contended lock with N waiters. Prints a table
//! with the ratios, and the CPU each cycle costs the broker, the store (Redis,
//! PostgreSQL, etcd or ZooKeeper, when it runs on this machine: see `probe`)
//! and the load generator.

use std::{
    process::ExitCode,
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

use leasehold_proto::{AcquireRequest, DescribeRequest, Lease, ReleaseRequest};
use leasehold_server::{
    duration::parse_duration,
    lease::token,
    store::{lease_key, read_record, Acquired, GrantSpec, Store},
};

use crate::{
    broker::OwnBroker,
    plain::PlainLock,
    probe::{cpu_seconds, LocalCpu, Probe},
    session::SessionLink,
    stats::{micros, millis},
    EXIT_BROKER_ERROR,
};

/// Arguments of `bench cycles`.
#[derive(clap::Args, Debug)]
pub struct CyclesArgs {
    /// Store URL (Redis, PostgreSQL, etcd or ZooKeeper): the broker under test
    /// runs on it, and the direct baseline talks to it.
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
    /// Brokers under test, sharing the store: the uncontended workers are
    /// spread over them (the scale-out figure: several stateless brokers on
    /// one Redis, or on a Redis Cluster).
    #[arg(long, default_value_t = 1)]
    brokers: usize,
    /// `--worker-threads` of the broker under test. 1 is the fastest where
    /// load generator, broker and Redis share two cores; 0 is one per core.
    #[arg(long, default_value_t = 1)]
    broker_worker_threads: usize,
    /// Failovers to measure (0 to skip): a holder process killed with
    /// SIGKILL while a waiter is in line.
    #[arg(long, default_value_t = 3)]
    failovers: usize,
    /// TTL of the lease whose holder is killed.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    failover_ttl: Duration,
    /// How long the plain Redis lock's contended workers sleep before they
    /// try again (a hand-written lock has no wait line: its users poll).
    #[arg(long, default_value = "2ms", value_parser = parse_duration)]
    plain_retry: Duration,
    /// An etcd endpoint (e.g. `http://127.0.0.1:2379`): run the same
    /// scenarios with etcd's v3 lock service too.
    #[arg(long)]
    etcd: Option<String>,
    /// How the uncontended workers connect: `shared` (one HTTP/2 connection
    /// to each broker, and one Redis connection for the plain lock and the
    /// direct side, multiplexed by all) or `each` (a connection of its own
    /// per worker, to the broker and, for the plain lock, to Redis).
    #[arg(long, value_enum, default_value = "shared")]
    connections: Connections,
}

/// See [`CyclesArgs::connections`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Connections {
    /// One connection, multiplexed by every worker.
    Shared,
    /// A connection per worker.
    Each,
}

/// Runs the scenarios; see the module doc.
pub async fn cycles(args: CyclesArgs) -> ExitCode {
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("leasehold-bench cycles: {e}");
            ExitCode::from(EXIT_BROKER_ERROR)
        }
    }
}

/// Latencies (µs) and a count of completed cycles.
#[derive(Default)]
pub struct Run {
    pub cycles: u64,
    pub latencies_us: Vec<u64>,
}

impl Run {
    /// The `p` quantile of the latencies (µs).
    pub fn percentile(&self, p: f64) -> u64 {
        crate::stats::percentile(&mut self.latencies_us.clone(), p)
    }
}

async fn run(args: CyclesArgs) -> Result<(), String> {
    let run_id = std::process::id();
    let threads = args.broker_worker_threads.to_string();
    let mut brokers = Vec::new();
    for _ in 0..args.brokers.max(1) {
        brokers.push(
            crate::broker::start_broker(
                &args.store,
                &["--worker-threads", &threads],
                &format!("cycles{run_id}:"),
            )
            .await?,
        );
    }
    // Each side runs on the runtime that serves it best on a small machine:
    // the gRPC clients on this process's one thread (fewest hand-offs), the
    // direct baseline on a runtime with a thread per core (measured faster
    // for it at 16 workers, and never slower). The baseline stays the best
    // this client library does.
    let (direct_runtime, direct) =
        crate::broker::direct_store(&args.store, &format!("cycles{run_id}d:"))?;
    // The plain lock on the direct side's runtime: both are Redis clients
    // without a broker, measured alike. On one Redis server only (a
    // hand-written lock does not follow a Sentinel or a Cluster).
    let plain = if PlainLock::supports(&args.store) {
        direct_runtime
            .spawn(PlainLock::connect(
                args.store.clone(),
                format!("cycles{run_id}p:"),
            ))
            .await
            .map_err(|e| e.to_string())?
            .map(Some)
    } else {
        Ok(None)
    };
    // The store's CPU, read from /proc when it runs here.
    let probe = Probe::connect(&args.store).await;
    let result = match (plain, probe) {
        (Ok(plain), Ok(probe)) => {
            let sides = Sides {
                brokers: &brokers,
                broker_prefix: format!("cycles{run_id}:"),
                direct: &direct,
                direct_prefix: format!("cycles{run_id}d:"),
                plain,
                probe,
                runtime: direct_runtime.handle(),
            };
            scenarios(&args, &sides).await
        }
        (Err(e), _) | (_, Err(e)) => Err(e),
    };
    // Dropping a runtime may block; not allowed inside this one.
    direct_runtime.shutdown_background();
    result
}

/// What the scenarios measure: the brokers under test and the store clients
/// without a broker (on the thread-per-core runtime), with their key
/// prefixes, and the store's probe.
struct Sides<'a> {
    brokers: &'a [OwnBroker],
    broker_prefix: String,
    direct: &'a Store,
    direct_prefix: String,
    /// `None` unless the store is one Redis server.
    plain: Option<PlainLock>,
    /// `None` for a store whose figures are not read (see `Probe::connect`).
    probe: Option<Probe>,
    runtime: &'a tokio::runtime::Handle,
}

/// CPU seconds used so far by the brokers, the store (when it runs on this
/// machine: redis-server, etcd, ZooKeeper's JVM, or PostgreSQL's process tree;
/// from /proc) and this load generator.
#[derive(Clone, Copy, Default)]
struct CpuSample {
    brokers: f64,
    store: f64,
    load: f64,
}

impl CpuSample {
    fn take(brokers: &[u32], store: Option<LocalCpu>) -> Self {
        CpuSample {
            brokers: brokers.iter().map(|&pid| cpu_seconds(pid)).sum(),
            store: store.map_or(0.0, |cpu| cpu.seconds()),
            load: cpu_seconds(std::process::id()),
        }
    }

    /// µs of CPU per cycle since `before`.
    fn per_cycle(&self, before: &CpuSample, cycles: u64) -> CpuSample {
        let per = |a: f64, b: f64| (a - b) * 1e6 / cycles.max(1) as f64;
        CpuSample {
            brokers: per(self.brokers, before.brokers),
            store: per(self.store, before.store),
            load: per(self.load, before.load),
        }
    }
}

/// Runs `run` and the CPU it cost, per cycle.
async fn with_cpu<F>(
    pids: &[u32],
    store: Option<LocalCpu>,
    run: F,
) -> Result<(Run, CpuSample), String>
where
    F: std::future::Future<Output = Result<Run, String>>,
{
    let before = CpuSample::take(pids, store);
    let run = run.await?;
    let cpu = CpuSample::take(pids, store).per_cycle(&before, run.cycles);
    Ok((run, cpu))
}

/// The first of `brokers` runs the contended and failover scenarios; the
/// uncontended workers are spread over all of them.
async fn scenarios(args: &CyclesArgs, sides: &Sides<'_>) -> Result<(), String> {
    let (brokers, direct, direct_runtime) = (sides.brokers, sides.direct, sides.runtime);
    let broker = &brokers[0];
    let grpc = &broker.grpc;
    let clients: Vec<_> = brokers.iter().map(|b| b.grpc.clone()).collect();
    let pids: Vec<u32> = brokers.iter().filter_map(|b| b.child.id()).collect();
    let store_cpu = sides.probe.as_ref().and_then(Probe::local_cpu);
    let store_name = sides.probe.as_ref().map_or("store", Probe::store);
    if brokers.len() > 1 {
        println!(
            "{} brokers; uncontended workers spread over them",
            brokers.len()
        );
    }
    println!(
        "{:<24} {:>12} {:>12} {:>7} {:>22} {:>22}",
        "scenario",
        "broker/s",
        "direct/s",
        "ratio",
        "broker p50/p99/p999 µs",
        "direct p50/p99/p999 µs"
    );
    let etcd = match &args.etcd {
        Some(url) => Some(crate::etcd::Etcd::connect(url).await?),
        None => None,
    };
    let per_s = |r: &Run| r.cycles as f64 / args.duration.as_secs_f64();
    let tail = |r: &Run| {
        format!(
            "{}/{}/{}",
            r.percentile(0.5),
            r.percentile(0.99),
            r.percentile(0.999)
        )
    };
    for &workers in &args.workers {
        let label = format!("uncontended, {workers} workers");
        let unary_clients = match args.connections {
            Connections::Shared => clients.clone(),
            Connections::Each => connect_each(brokers, workers).await?,
        };
        let (broker, broker_cpu) = with_cpu(
            &pids,
            store_cpu,
            uncontended_broker(&unary_clients, workers, args.duration),
        )
        .await?;
        drop(unary_clients);
        let links = match args.connections {
            Connections::Shared => {
                let mut links = Vec::new();
                for client in &clients {
                    links.push(SessionLink::open(&mut client.clone()).await?);
                }
                links
            }
            Connections::Each => {
                let mut links = Vec::new();
                for mut client in connect_each(brokers, workers).await? {
                    links.push(SessionLink::open(&mut client).await?);
                }
                links
            }
        };
        let (session, session_cpu) = with_cpu(
            &pids,
            store_cpu,
            uncontended_session(&links, workers, args.duration),
        )
        .await?;
        drop(links);
        let (direct, direct_cpu) = with_cpu(&pids, store_cpu, async {
            direct_runtime
                .spawn(uncontended_direct(direct.clone(), workers, args.duration))
                .await
                .map_err(|e| e.to_string())?
        })
        .await?;
        println!(
            "{:<24} {:>12.0} {:>12.0} {:>7.2} {:>22} {:>22}",
            label,
            per_s(&broker),
            per_s(&direct),
            per_s(&broker) / per_s(&direct).max(1.0),
            tail(&broker),
            tail(&direct)
        );
        let store = |cpu: &CpuSample| match store_cpu {
            Some(_) => format!("{store_name} {:.1}", cpu.store),
            None => format!("{store_name} -"),
        };
        println!(
            "{:<24} {:>12.0} cycles/s over Session streams; session/unary {:.2}x; acquire p50/p99/p999 {} µs",
            label,
            per_s(&session),
            per_s(&session) / per_s(&broker).max(1.0),
            tail(&session)
        );
        let mut cpu = format!(
            "{label:<24} CPU µs per cycle: broker {:.1} + {} + load generator {:.1}; session: broker {:.1} + {} + load generator {:.1}; direct: {} + load generator {:.1}",
            broker_cpu.brokers,
            store(&broker_cpu),
            broker_cpu.load,
            session_cpu.brokers,
            store(&session_cpu),
            session_cpu.load,
            store(&direct_cpu),
            direct_cpu.load,
        );
        if let Some(lock) = &sides.plain {
            let locks = match args.connections {
                Connections::Shared => vec![lock.clone()],
                Connections::Each => {
                    let lock = lock.clone();
                    direct_runtime
                        .spawn(async move {
                            let mut locks = Vec::with_capacity(workers);
                            for _ in 0..workers {
                                locks.push(lock.another().await?);
                            }
                            Ok::<_, String>(locks)
                        })
                        .await
                        .map_err(|e| e.to_string())??
                }
            };
            let (plain, plain_cpu) = with_cpu(&pids, store_cpu, async {
                direct_runtime
                    .spawn(crate::plain::uncontended(locks, workers, args.duration))
                    .await
                    .map_err(|e| e.to_string())?
            })
            .await?;
            println!(
                "{:<24} {:>12.0} cycles/s with a plain Redis lock; broker/plain {:.2}x, session/plain {:.2}x; plain acquire p50/p99/p999 {} µs",
                label,
                per_s(&plain),
                per_s(&broker) / per_s(&plain).max(1.0),
                per_s(&session) / per_s(&plain).max(1.0),
                tail(&plain)
            );
            cpu += &format!(
                "; plain lock: {} + load generator {:.1}",
                store(&plain_cpu),
                plain_cpu.load
            );
        }
        println!("{cpu}");
        if let Some(etcd) = &etcd {
            let etcd = crate::etcd::uncontended(etcd, workers, args.duration).await?;
            println!(
                "{:<24} {:>12.0} cycles/s on etcd; broker/etcd {:.1}x; etcd Lock p50/p99/p999 {} µs",
                label,
                per_s(&etcd),
                per_s(&broker) / per_s(&etcd).max(1.0),
                tail(&etcd)
            );
        }
    }
    if args.contended > 0 {
        let label = format!("one lock, {} waiters", args.contended);
        let (run, grants) = contended(
            Contender::Unary(grpc.clone()),
            args.contended,
            args.duration,
        )
        .await?;
        print_contended(&label, &run, &grants, args.duration);
        let link = SessionLink::open(&mut grpc.clone()).await?;
        let (run, grants) =
            contended(Contender::Session(link), args.contended, args.duration).await?;
        print_contended(
            &format!("{label}, one Session stream"),
            &run,
            &grants,
            args.duration,
        );
        if let Some(lock) = &sides.plain {
            let (run, grants) = direct_runtime
                .spawn(crate::plain::contended(
                    lock.clone(),
                    args.contended,
                    args.duration,
                    args.plain_retry,
                ))
                .await
                .map_err(|e| e.to_string())??;
            print_contended(
                &format!(
                    "{label}, plain lock polling every {} ms",
                    args.plain_retry.as_secs_f64() * 1e3
                ),
                &run,
                &grants,
                args.duration,
            );
        }
        if let Some(etcd) = &etcd {
            let (run, grants) = crate::etcd::contended(etcd, args.contended, args.duration).await?;
            print_contended(&format!("{label}, etcd"), &run, &grants, args.duration);
        }
    }
    if args.failovers > 0 {
        let ttl = args.failover_ttl;
        let expiry = match sides.plain.as_ref() {
            Some(plain) => Some(Expiry::Redis(plain.connection())),
            None => match crate::etcd::Etcd::for_store(&args.store).await? {
                Some(etcd) => Some(Expiry::Etcd(Box::new(etcd))),
                None => crate::zookeeper::ZooKeeper::for_store(&args.store)
                    .await?
                    .map(Expiry::ZooKeeper),
            },
        };
        let broker_runs = failover_broker(
            broker,
            expiry.clone(),
            &sides.broker_prefix,
            ttl,
            args.failovers,
        )
        .await?;
        let direct_runs = direct_runtime
            .spawn(failover_direct(
                direct.clone(),
                expiry,
                sides.direct_prefix.clone(),
                ttl,
                args.failovers,
            ))
            .await
            .map_err(|e| e.to_string())??;
        // The store whose own clock times the grant: Redis (its `g`) or
        // ZooKeeper (the new lock node's `mtime`); elsewhere the row says
        // "in Redis -", as before.
        let in_store = match sides.probe.as_ref().map(Probe::store) {
            Some("ZooKeeper") => "ZooKeeper",
            _ => "Redis",
        };
        let mut sides = vec![("broker", broker_runs), ("direct", direct_runs)];
        if let Some(etcd) = &etcd {
            sides.push((
                "etcd",
                crate::etcd::failover(etcd, ttl, args.failovers).await?,
            ));
        }
        for (side, runs) in sides {
            let ms = |d: &Duration| format!("{:.0}", d.as_secs_f64() * 1e3);
            let late = |late: Option<f64>| late.map_or("-".into(), |ms| format!("{ms:.1}"));
            println!(
                "{:<24} kill -9 -> next grant {} ms; expiry -> grant {} ms, in {} {} ms (TTL {} ms)",
                format!("holder killed, {side}"),
                runs.iter()
                    .map(|r| ms(&r.kill_to_grant))
                    .collect::<Vec<_>>()
                    .join(" / "),
                runs.iter()
                    .map(|r| late(r.expiry_to_grant_ms))
                    .collect::<Vec<_>>()
                    .join(" / "),
                in_store,
                runs.iter()
                    .map(|r| late(r.expiry_to_grant_in_store_ms))
                    .collect::<Vec<_>>()
                    .join(" / "),
                ttl.as_millis()
            );
        }
    }
    Ok(())
}

/// One failover: from the holder's death to the waiter's grant, and from the
/// lease's expiry to the grant.
///
/// The expiry is the lease's own, as Redis has it (its `e` field, in ms of
/// the Redis clock, read after any renewal the holder sent before it died
/// has landed), not an estimate from a Describe's remaining time (which
/// reads early by the time Describe took to reach Redis through the broker,
/// and misses a renewal still in flight at the kill); on etcd (the etcd
/// store, etcd's lock service), the etcd lease's, as its time to live
/// shows it (`Etcd::expiry_ms`: to a few ms); on ZooKeeper, the lock
/// node's last renewal (its `mtime`, the leader's clock) plus its TTL, as
/// the store judges it. The grant is timed twice: where the waiter learns
/// it (the wall clock here: the store is assumed to run on this machine, as
/// in every bench run), and in the store (the new lease's grant time:
/// Redis's `g`, ZooKeeper's new lock node's `mtime`; the store's own
/// lateness, without the answer's way back; not on etcd).
pub struct Failover {
    pub kill_to_grant: Duration,
    /// `None` where the expiry is not known (PostgreSQL, a store that is
    /// not one Redis server, one etcd without TLS or auth or a ZooKeeper
    /// ensemble; an etcd lease with under a second left when first read).
    pub expiry_to_grant_ms: Option<f64>,
    /// `None` where the expiry is not known, and on etcd.
    pub expiry_to_grant_in_store_ms: Option<f64>,
}

/// Where a failover reads the dead holder's lease: Redis's hash of it, the
/// etcd lease its lock key is on (the etcd store's `{prefix}{name}|l`:
/// `server/src/store/etcd/keys.rs`), or ZooKeeper's lock node of the name
/// (its last renewal's `mtime` plus its TTL: `crate::zookeeper`).
#[derive(Clone)]
enum Expiry {
    Redis(redis::aio::MultiplexedConnection),
    Etcd(Box<crate::etcd::Etcd>),
    ZooKeeper(crate::zookeeper::ZooKeeper),
}

impl Expiry {
    /// The expiry (wall clock, ms) of the lease on `name` of a holder that
    /// just died, read after [`SETTLE`]; `None` when etcd's reading misses
    /// it (see [`Failover`]).
    async fn dead_lease(&mut self, prefix: &str, name: &str) -> Result<Option<f64>, String> {
        match self {
            Expiry::Redis(redis) => Ok(Some(dead_lease_expiry(redis, prefix, name).await?)),
            Expiry::Etcd(etcd) => {
                tokio::time::sleep(SETTLE).await;
                let key = format!("{prefix}{name}|l");
                match etcd.lease_of(key.as_bytes()).await? {
                    Some(lease) => etcd.expiry_ms(lease).await,
                    None => Err(format!(
                        "the dead holder's lock on {name} was gone within {SETTLE:?} of its \
                         death (TTL too short to measure)"
                    )),
                }
            }
            Expiry::ZooKeeper(zk) => {
                tokio::time::sleep(SETTLE).await;
                match zk.expiry_ms(prefix, name).await? {
                    Some(expiry) if expiry > wall_ms() => Ok(Some(expiry)),
                    other => Err(format!(
                        "the dead holder's lease on {name} ended within {SETTLE:?} of its \
                         death (TTL too short to measure): expiry {other:?}"
                    )),
                }
            }
        }
    }

    /// When the waiter's lease on `name` was granted, in the store's clock
    /// (ms): Redis's `g`; ZooKeeper's lock node's `mtime` (nothing renews
    /// the waiter's lease before it is read); etcd keeps no such time.
    async fn granted_at(&mut self, prefix: &str, name: &str) -> Result<Option<f64>, String> {
        match self {
            Expiry::Redis(redis) => Ok(lease_fields(redis, prefix, name).await?.2),
            Expiry::Etcd(_) => Ok(None),
            Expiry::ZooKeeper(zk) => zk.written_ms(prefix, name).await,
        }
    }
}

/// Now by the wall clock (which Redis' `TIME` reads too), in ms.
pub fn wall_ms() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1e3)
}

/// The lease of `name` as Redis has it: its owner token, expiry and grant
/// time (ms of the Redis clock).
async fn lease_fields(
    redis: &mut redis::aio::MultiplexedConnection,
    prefix: &str,
    name: &str,
) -> Result<(Option<String>, Option<f64>, Option<f64>), String> {
    let record = read_record(redis, &lease_key(prefix, name)).await?;
    // Milliseconds of the Redis clock: far below 2^53, exact as f64.
    #[allow(clippy::cast_precision_loss)]
    Ok(match record {
        Some(r) => (
            Some(r.owner),
            Some(r.expiry_ms as f64),
            Some(r.granted_ms as f64),
        ),
        None => (None, None, None),
    })
}

/// The expiry of the lease on `name` of a holder that just died: read after
/// [`SETTLE`], so that a renewal sent just before the death has landed.
async fn dead_lease_expiry(
    redis: &mut redis::aio::MultiplexedConnection,
    prefix: &str,
    name: &str,
) -> Result<f64, String> {
    tokio::time::sleep(SETTLE).await;
    match lease_fields(redis, prefix, name).await? {
        (Some(_), Some(expiry), _) if expiry > wall_ms() => Ok(expiry),
        other => Err(format!(
            "the dead holder's lease on {name} ended within {SETTLE:?} of its death \
             (TTL too short to measure): {other:?}"
        )),
    }
}

/// How long after a holder's death its lease's expiry is read: a renewal in
/// flight at the kill lands well within it, and a TTL is far longer.
pub const SETTLE: Duration = Duration::from_millis(100);

/// A `leasehold hold` process keeps a lease alive over KeepAlive; a waiter
/// queues for the lock; the holder is killed with SIGKILL. Nothing tells the
/// broker: the waiter must be granted when the lease expires.
async fn failover_broker(
    broker: &OwnBroker,
    mut expiry: Option<Expiry>,
    prefix: &str,
    ttl: Duration,
    runs: usize,
) -> Result<Vec<Failover>, String> {
    use tokio::io::AsyncBufReadExt;
    let exe = crate::broker::leasehold_exe()?;
    let mut results = Vec::new();
    for run in 0..runs {
        let name = format!("bench/failover/{}/{run}", std::process::id());
        let mut holder = tokio::process::Command::new(&exe)
            .args(["hold", "--broker", &broker.url, "--lock", &name])
            .args(["--ttl", &format!("{}ms", ttl.as_millis())])
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start leasehold hold: {e}"))?;
        let stdout = holder.stdout.take().ok_or("no stdout")?;
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        match lines.next_line().await {
            Ok(Some(line)) if line.starts_with("granted") => {}
            other => return Err(format!("leasehold hold did not get the lock: {other:?}")),
        }
        // Let it renew a few times, so it dies at a random point of its
        // heartbeat period, as a real holder would.
        tokio::time::sleep(ttl + Duration::from_millis(getrandom::u64().unwrap_or(0) % 700)).await;

        let mut waiter = broker.grpc.clone();
        let request = AcquireRequest {
            name: name.clone(),
            ttl_ms: 10_000,
            wait_timeout_ms: 3 * millis(ttl) + 5_000,
            ..Default::default()
        };
        let granted = tokio::spawn(async move {
            let lease = waiter.acquire(request).await;
            (Instant::now(), wall_ms(), lease)
        });
        // The waiter is in line before the kill.
        let mut describer = broker.grpc.clone();
        loop {
            let described = describer
                .describe(DescribeRequest {
                    name: name.clone(),
                    ..Default::default()
                })
                .await
                .map_err(|s| format!("describe: {}", s.message()))?
                .into_inner();
            if described.waiters > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        holder.start_kill().map_err(|e| e.to_string())?;
        let killed = Instant::now();
        let _ = holder.wait().await;
        let expired = match &mut expiry {
            Some(expiry) => expiry.dead_lease(prefix, &name).await?,
            None => None,
        };
        let (at, seen, lease) = granted.await.map_err(|e| e.to_string())?;
        let lease = lease
            .map_err(|s| format!("the waiter was not granted: {}", s.message()))?
            .into_inner()
            .lease
            .ok_or("no lease")?;
        let granted_at = match &mut expiry {
            Some(expiry) => expiry.granted_at(prefix, &name).await?,
            None => None,
        };
        let _ = describer
            .release(ReleaseRequest {
                name: lease.name,
                owner_token: lease.owner_token,
            })
            .await;
        results.push(Failover {
            kill_to_grant: at.duration_since(killed),
            expiry_to_grant_ms: expired.map(|e| seen - e),
            expiry_to_grant_in_store_ms: expired.zip(granted_at).map(|(e, g)| g - e),
        });
    }
    Ok(results)
}

/// The same against Redis directly: the holder renews every TTL/3 and stops
/// (dies) at a random point; the waiter tries again when the script says the
/// lease will have expired (the broker's own rule, minus the broker). The
/// etcd store cannot say (its answer's `remaining_ms` is the holder's whole
/// TTL: etcd's leader alone knows the expiry, and the broker waits for
/// etcd's Watch instead), so there the waiter tries again a TTL apart: its
/// figures are that polling's, not the store's.
async fn failover_direct(
    store: Store,
    mut expiry: Option<Expiry>,
    prefix: String,
    ttl: Duration,
    runs: usize,
) -> Result<Vec<Failover>, String> {
    let ttl_ms = millis(ttl);
    let mut results = Vec::new();
    for run in 0..runs {
        let name = format!("bench/failover/{}/{run}", std::process::id());
        let holder = spec(&name, ttl_ms)?;
        match store.acquire(&holder).await.map_err(|e| e.to_string())? {
            Acquired::Granted { .. } => {}
            blocked @ Acquired::Blocked(_) => {
                return Err(format!("direct holder refused: {blocked:?}"))
            }
        }
        let keeper = {
            let (store, name, token) = (store.clone(), name.clone(), holder.token.clone());
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(ttl / 3);
                loop {
                    tick.tick().await;
                    let _ = store.renew(&name, &token, None).await;
                }
            })
        };
        tokio::time::sleep(ttl + Duration::from_millis(getrandom::u64().unwrap_or(0) % 700)).await;
        keeper.abort();
        let _ = keeper.await;
        let killed = Instant::now();
        let waiter = GrantSpec {
            queued: true,
            ..spec(&name, 10_000)?
        };
        let waiting = {
            let store = store.clone();
            tokio::spawn(async move {
                loop {
                    match store.acquire(&waiter).await.map_err(|e| e.to_string())? {
                        Acquired::Granted { .. } => {
                            break Ok::<_, String>((Instant::now(), wall_ms(), waiter.token))
                        }
                        Acquired::Blocked(blocked) => {
                            let wake =
                                Instant::now() + Duration::from_millis(blocked.remaining_ms.max(1));
                            tokio::time::sleep_until(wake.into()).await;
                        }
                    }
                }
            })
        };
        let expired = match &mut expiry {
            Some(expiry) => expiry.dead_lease(&prefix, &name).await?,
            None => None,
        };
        let (at, seen, token) = waiting.await.map_err(|e| e.to_string())??;
        let granted_at = match &mut expiry {
            Some(expiry) => expiry.granted_at(&prefix, &name).await?,
            None => None,
        };
        let _ = store.release(&name, &token).await;
        results.push(Failover {
            kill_to_grant: at.duration_since(killed),
            expiry_to_grant_ms: expired.map(|e| seen - e),
            expiry_to_grant_in_store_ms: expired.zip(granted_at).map(|(e, g)| g - e),
        });
    }
    Ok(results)
}

fn spec(name: &str, ttl_ms: u64) -> Result<GrantSpec, String> {
    Ok(GrantSpec {
        name: name.to_owned(),
        token: token::generate().map_err(|e| e.to_string())?,
        holder: String::new(),
        ttl_ms,
        lock_delay_ms: 0,
        limit: 1,
        queued: false,
    })
}

async fn uncontended_broker(
    brokers: &[crate::broker::BenchClient],
    workers: usize,
    duration: Duration,
) -> Result<Run, String> {
    let end = Instant::now() + duration;
    let mut tasks = Vec::new();
    for w in 0..workers {
        let mut grpc = brokers[w % brokers.len()].clone();
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
                run.latencies_us.push(micros(started.elapsed()));
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

/// A connection of its own per worker, to the brokers in turn.
async fn connect_each(
    brokers: &[OwnBroker],
    workers: usize,
) -> Result<Vec<crate::broker::BenchClient>, String> {
    let mut clients = Vec::with_capacity(workers);
    for w in 0..workers {
        let url = &brokers[w % brokers.len()].url;
        let addr = url
            .trim_start_matches("http://")
            .parse()
            .map_err(|e| format!("broker URL {url}: {e}"))?;
        clients.push(crate::broker::bench_client(addr).await?);
    }
    Ok(clients)
}

/// The uncontended cycle as messages on Session streams: worker `w` on
/// `links[w % links.len()]` (one per broker, or one per worker).
async fn uncontended_session(
    links: &[Arc<SessionLink>],
    workers: usize,
    duration: Duration,
) -> Result<Run, String> {
    let end = Instant::now() + duration;
    let mut tasks = Vec::new();
    for w in 0..workers {
        let link = Arc::clone(&links[w % links.len()]);
        let name = format!("bench/cycles/{}/{workers}/{w}/s", std::process::id());
        tasks.push(tokio::spawn(async move {
            let mut run = Run::default();
            while Instant::now() < end {
                let started = Instant::now();
                let lease = link
                    .acquire(AcquireRequest {
                        name: name.clone(),
                        ttl_ms: 10_000,
                        ..Default::default()
                    })
                    .await
                    .map_err(|e| format!("acquire: {e}"))?;
                run.latencies_us.push(micros(started.elapsed()));
                link.release(lease)
                    .await
                    .map_err(|e| format!("release: {e}"))?;
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
                    blocked @ Acquired::Blocked(_) => {
                        return Err(format!("direct acquire refused: {blocked:?}"))
                    }
                }
                run.latencies_us.push(micros(started.elapsed()));
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

pub async fn merge(
    tasks: Vec<tokio::task::JoinHandle<Result<Run, String>>>,
) -> Result<Run, String> {
    let mut total = Run::default();
    for task in tasks {
        let run = task.await.map_err(|e| e.to_string())??;
        total.cycles += run.cycles;
        total.latencies_us.extend(run.latencies_us);
    }
    Ok(total)
}

/// The handoffs of one contended lock, shared by its workers: each grant to
/// another worker than the last holder is timed from the release before it.
/// A worker that takes the lock again right after its own release (a
/// polling lock lets it: the others are asleep) hands nothing off: such a
/// grant is counted, not timed.
#[derive(Clone, Default)]
pub struct Handoffs {
    /// When the lock was last released, and by which worker.
    last_release: Arc<Mutex<Option<(Instant, usize)>>>,
    samples_us: Arc<Mutex<Vec<u64>>>,
}

impl Handoffs {
    /// Worker `worker` got the lock.
    pub fn granted(&self, worker: usize) {
        let now = Instant::now();
        if let Some((released, by)) = *self
            .last_release
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
        {
            if by != worker {
                self.samples_us
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(micros(now.duration_since(released)));
            }
        }
    }

    /// Worker `worker` is about to release it.
    pub fn releasing(&self, worker: usize) {
        *self
            .last_release
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some((Instant::now(), worker));
    }

    /// Waits for the workers (each returns its grants) and returns the run
    /// (cycles: grants in all; latencies: handoffs to another worker) and
    /// each worker's grants.
    pub async fn finish(
        self,
        workers: Vec<tokio::task::JoinHandle<Result<u64, String>>>,
    ) -> Result<(Run, Vec<u64>), String> {
        let mut grants = Vec::new();
        for worker in workers {
            grants.push(worker.await.map_err(|e| e.to_string())??);
        }
        let run = Run {
            cycles: grants.iter().sum(),
            latencies_us: std::mem::take(
                &mut *self
                    .samples_us
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner),
            ),
        };
        Ok((run, grants))
    }
}

/// Prints a contended run: grants per second (and those that went to
/// another worker than the last holder), handoff latency and fairness
/// (fewest / most grants per worker).
fn print_contended(label: &str, run: &Run, grants: &[u64], duration: Duration) {
    let (min, max) = (
        grants.iter().min().copied().unwrap_or(0),
        grants.iter().max().copied().unwrap_or(0),
    );
    let per_s = |n: f64| n / duration.as_secs_f64();
    println!(
        "{label:<24} {:>12.0} handoffs/s ({:.0}/s to another worker); handoff p50/p99 {}/{} µs; grants per worker min/max {min}/{max} ({:.2})",
        per_s(run.cycles as f64),
        per_s(run.latencies_us.len() as f64),
        run.percentile(0.5),
        run.percentile(0.99),
        min as f64 / max.max(1) as f64
    );
}

/// `waiters` workers on one lock, each waiting for it, holding it for no
/// time and releasing it. Returns the handoffs and each worker's grants.
async fn contended(
    contender: Contender,
    waiters: usize,
    duration: Duration,
) -> Result<(Run, Vec<u64>), String> {
    let end = Instant::now() + duration;
    let name = format!("bench/contended/{}", std::process::id());
    let handoffs = Handoffs::default();
    let mut tasks = Vec::new();
    for worker in 0..waiters {
        let (mut contender, name, handoffs) = (contender.clone(), name.clone(), handoffs.clone());
        tasks.push(tokio::spawn(async move {
            let mut grants = 0u64;
            while Instant::now() < end {
                let request = AcquireRequest {
                    name: name.clone(),
                    ttl_ms: 10_000,
                    wait_timeout_ms: 10_000,
                    ..Default::default()
                };
                // A wait that ran out: wait again.
                let Ok(lease) = contender.acquire(request).await else {
                    continue;
                };
                handoffs.granted(worker);
                grants += 1;
                handoffs.releasing(worker);
                contender.release(lease).await?;
            }
            Ok::<u64, String>(grants)
        }));
    }
    handoffs.finish(tasks).await
}

/// How the contended workers reach the broker: a unary call each, or
/// messages on one Session stream they share.
#[derive(Clone)]
enum Contender {
    Unary(crate::broker::BenchClient),
    Session(Arc<SessionLink>),
}

impl Contender {
    async fn acquire(&mut self, request: AcquireRequest) -> Result<Lease, String> {
        match self {
            Contender::Unary(grpc) => grpc
                .acquire(request)
                .await
                .map_err(|s| s.message().to_owned())?
                .into_inner()
                .lease
                .ok_or_else(|| "no lease".into()),
            Contender::Session(link) => link.acquire(request).await,
        }
    }

    async fn release(&mut self, lease: Lease) -> Result<(), String> {
        match self {
            Contender::Unary(grpc) => grpc
                .release(ReleaseRequest {
                    name: lease.name,
                    owner_token: lease.owner_token,
                })
                .await
                .map(drop)
                .map_err(|s| format!("release: {}", s.message())),
            Contender::Session(link) => link.release(lease).await,
        }
    }
}
