//! `leasehold-bench soak`: a bounded soak. It starts a broker of its own (a
//! child `leasehold serve`, so that its memory can be watched), takes N
//! leases, keeps them alive over S KeepAlive streams (each stream renews its
//! share every interval), and reports the broker's RSS, the heartbeat round
//! trip p99 and the leases lost, every 10 seconds and at the end. Exits 1 if
//! any lease was lost. With `--churn`, it also takes leases on new names and
//! leaves them to expire, to show the broker forgets them.

use std::{
    process::ExitCode,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use leasehold_proto::{
    lease_status::State, AcquireRequest, KeepAliveRequest, KeepAliveResponse, LeaseRef,
};
use leasehold_server::duration::parse_duration;
use tonic::Streaming;

use crate::{
    session::SessionLink,
    stats::{micros, millis},
    EXIT_BROKER_ERROR,
};

/// Arguments of `bench soak`.
#[derive(clap::Args, Debug)]
pub struct SoakArgs {
    /// Store of the broker under test: `memory` or a Redis URL.
    #[arg(long, default_value = "memory")]
    store: String,
    /// Leases kept alive.
    #[arg(long, default_value_t = 10_000)]
    leases: usize,
    /// KeepAlive streams they are spread over.
    #[arg(long, default_value_t = 100)]
    streams: usize,
    /// Time between two heartbeats of a stream.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    interval: Duration,
    /// Lease TTL.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    ttl: Duration,
    /// How long to run.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    duration: Duration,
    /// Leases a second taken on new names and left to expire, never renewed
    /// nor released (a crashing client's pattern), on the same connection,
    /// with `--conn-max-leases` set on the broker: the broker's books of
    /// them must stay the size of the leases alive, so its memory stays flat.
    #[arg(long, default_value_t = 0)]
    churn: usize,
    /// TTL of the churned leases.
    #[arg(long, default_value = "500ms", value_parser = parse_duration)]
    churn_ttl: Duration,
}

/// Round trips and losses, shared by the streams.
#[derive(Default)]
pub struct Tally {
    pub rtts_us: Mutex<Vec<u64>>,
    pub lost: AtomicU64,
    pub heartbeats: AtomicU64,
    /// Leases taken by the churn and left to expire.
    pub churned: AtomicU64,
}

/// Runs the soak; see the module doc.
pub async fn soak(args: SoakArgs) -> ExitCode {
    match run(args).await {
        Ok(0) => ExitCode::SUCCESS,
        Ok(_) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("leasehold-bench soak: {e}");
            ExitCode::from(EXIT_BROKER_ERROR)
        }
    }
}

async fn run(args: SoakArgs) -> Result<u64, String> {
    let max_leases = args.leases.max(1).to_string();
    let mut flags = vec!["--max-stream-leases", &max_leases];
    if args.churn > 0 {
        // A cap far above what is held: the books are kept, never full.
        flags.extend(["--conn-max-leases", "1000000000"]);
    }
    let crate::broker::OwnBroker {
        child: mut broker,
        grpc,
        ..
    } = crate::broker::start_broker(&args.store, &flags, &format!("soak{}:", std::process::id()))
        .await?;
    let pid = broker.id().ok_or("the broker exited")?;

    let names = (0..args.leases).map(|i| format!("soak/{i}"));
    let refs = acquire_many(&grpc, names, args.ttl, "soak").await?;
    let rss_start = rss_mib(pid);
    println!(
        "soak: {} leases over {} streams, heartbeat every {:?}, TTL {:?}, for {:?}; {} leases/s left to expire; broker RSS {:.1} MiB",
        args.leases, args.streams, args.interval, args.ttl, args.duration, args.churn, rss_start
    );

    let tally = Arc::new(Tally::default());
    let started = Instant::now();
    let end = started + args.duration;
    let per_stream = args.leases.div_ceil(args.streams.max(1)).max(1);
    let mut tasks = Vec::new();
    let shares: Vec<Vec<LeaseRef>> = refs.chunks(per_stream).map(<[LeaseRef]>::to_vec).collect();
    let count = shares.len();
    for (i, share) in shares.into_iter().enumerate() {
        // Streams spread over the interval, as independent clients would be,
        // rather than all beating at the same instant.
        let offset = stagger(args.interval, i, count);
        let tally = Arc::clone(&tally);
        let grpc = grpc.clone();
        // The stream ends as its task does (the broker then looks at its
        // leases past their TTL: the soak keeps them alive to the end).
        tasks.push(tokio::spawn(async move {
            stream(
                grpc,
                Heartbeats::Keepalive,
                share,
                args.interval,
                offset,
                end,
                tally,
            )
            .await;
        }));
    }

    if args.churn > 0 {
        tasks.push(tokio::spawn(churn(
            grpc.clone(),
            args.churn,
            args.churn_ttl,
            end,
            Arc::clone(&tally),
        )));
    }

    println!(
        "{:>8} {:>10} {:>12} {:>12} {:>8} {:>10}",
        "t_s", "rss_mib", "heartbeats", "p99_us", "lost", "churned"
    );
    let mut report = tokio::time::interval(Duration::from_secs(10));
    report.tick().await;
    let mut peak = rss_start;
    // After the first 10 s: the churn's leases then expire as fast as they
    // come, and anything kept of them shows as growth from here.
    let mut rss_first = None;
    // The last sample while the load ran: the end of the steady state,
    // before the streams close (their leases' teardown is a transient of
    // its own, a few MiB, returned or not by the allocator).
    let mut rss_last = None;
    while Instant::now() < end {
        report.tick().await;
        let rss = rss_mib(pid);
        peak = peak.max(rss);
        rss_first.get_or_insert(rss);
        rss_last = Some(rss);
        let mut window: Vec<u64> = std::mem::take(
            &mut *tally
                .rtts_us
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        println!(
            "{:>8} {:>10.1} {:>12} {:>12} {:>8} {:>10}",
            started.elapsed().as_secs(),
            rss,
            tally.heartbeats.load(Ordering::Relaxed),
            crate::stats::percentile(&mut window, 0.99),
            tally.lost.load(Ordering::Relaxed),
            tally.churned.load(Ordering::Relaxed)
        );
    }
    for task in tasks {
        let _ = task.await;
    }
    let lost = tally.lost.load(Ordering::Relaxed);
    let rss_end = rss_mib(pid);
    println!(
        "soak done: heartbeats={} lost={lost} churned={} rss_start_mib={rss_start:.1} rss_10s_mib={:.1} rss_last_mib={:.1} rss_peak_mib={:.1} rss_end_mib={rss_end:.1}",
        tally.heartbeats.load(Ordering::Relaxed),
        tally.churned.load(Ordering::Relaxed),
        rss_first.unwrap_or(rss_end),
        rss_last.unwrap_or(rss_end),
        peak.max(rss_end)
    );
    let _ = broker.start_kill();
    Ok(lost)
}

/// When the `i`th of `count` streams first beats: `interval * i / count`, the
/// streams spread evenly over one interval.
pub fn stagger(interval: Duration, i: usize, count: usize) -> Duration {
    let i = u32::try_from(i).expect("fewer than 2^32 streams: one task each");
    let count = u32::try_from(count).expect("fewer than 2^32 streams: one task each");
    interval * i / count
}

/// How a stream's heartbeats reach the broker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Heartbeats {
    /// A KeepAlive stream per share.
    Keepalive,
    /// A Session stream per share, the heartbeats as its messages.
    Session,
}

/// One stream: a heartbeat naming all of `leases` every `interval`, on a
/// KeepAlive stream or as messages of a Session stream (`how`), until
/// `end`. Returns the stream, still open (dropping it ends it), unless it
/// broke.
pub async fn stream(
    mut grpc: crate::broker::BenchClient,
    how: Heartbeats,
    leases: Vec<LeaseRef>,
    interval: Duration,
    offset: Duration,
    end: Instant,
    tally: Arc<Tally>,
) -> Option<Link> {
    tokio::time::sleep(offset).await;
    let mut link = match how {
        Heartbeats::Keepalive => {
            let (tx, rx) = mpsc::channel(1);
            match grpc.keep_alive(ReceiverStream::new(rx)).await {
                Ok(response) => Link::KeepAlive(tx, Box::new(response.into_inner())),
                Err(_) => Link::Down,
            }
        }
        Heartbeats::Session => match SessionLink::open(&mut grpc).await {
            Ok(link) => Link::Session(link),
            Err(_) => Link::Down,
        },
    };
    let mut tick = tokio::time::interval(interval);
    let mut seq = 0;
    while Instant::now() < end {
        tick.tick().await;
        seq += 1;
        let sent = Instant::now();
        let request = KeepAliveRequest {
            seq,
            leases: leases.clone(),
            ..Default::default()
        };
        let Some(answer) = link.beat(request).await else {
            tally.lost.fetch_add(leases.len() as u64, Ordering::Relaxed);
            return None;
        };
        let rtt = micros(sent.elapsed());
        let lost = answer
            .leases
            .iter()
            .filter(|s| s.state() == State::Lost)
            .count();
        tally.lost.fetch_add(lost as u64, Ordering::Relaxed);
        tally.heartbeats.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut rtts) = tally.rtts_us.lock() {
            rtts.push(rtt);
        }
    }
    Some(link)
}

/// A stream that carries heartbeats.
pub enum Link {
    KeepAlive(
        mpsc::Sender<KeepAliveRequest>,
        Box<Streaming<KeepAliveResponse>>,
    ),
    Session(Arc<SessionLink>),
    /// It could not be opened.
    Down,
}

impl Link {
    /// Sends one heartbeat and reads its answer; `None` when the stream
    /// broke or refused it.
    pub async fn beat(&mut self, request: KeepAliveRequest) -> Option<KeepAliveResponse> {
        match self {
            Link::KeepAlive(tx, responses) => {
                tx.send(request).await.ok()?;
                responses.message().await.ok().flatten()
            }
            Link::Session(link) => link.heartbeat(request).await.ok(),
            Link::Down => None,
        }
    }
}

/// Takes `per_second` leases a second on new names until `end`, and leaves
/// them to expire.
async fn churn(
    grpc: crate::broker::BenchClient,
    per_second: usize,
    ttl: Duration,
    end: Instant,
    tally: Arc<Tally>,
) {
    let per_tick = per_second.div_ceil(10);
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let mut next = 0usize;
    while Instant::now() < end {
        tick.tick().await;
        let names = (next..next + per_tick).map(|i| format!("soak-churn/{i}"));
        next += per_tick;
        match acquire_many(&grpc, names, ttl, "churn").await {
            Ok(refs) => {
                tally
                    .churned
                    .fetch_add(refs.len() as u64, Ordering::Relaxed);
            }
            Err(e) => {
                eprintln!("soak: churn: {e}");
                return;
            }
        }
    }
}

/// Takes a lease on each name, 64 calls at a time.
pub async fn acquire_many(
    grpc: &crate::broker::BenchClient,
    names: impl Iterator<Item = String>,
    ttl: Duration,
    holder: &str,
) -> Result<Vec<LeaseRef>, String> {
    let names: Vec<String> = names.collect();
    let mut refs = Vec::with_capacity(names.len());
    for chunk in names.chunks(64) {
        let calls = chunk.iter().map(|name| {
            let mut grpc = grpc.clone();
            let request = AcquireRequest {
                name: name.clone(),
                ttl_ms: millis(ttl),
                holder: holder.to_owned(),
                ..Default::default()
            };
            async move { grpc.acquire(request).await }
        });
        for result in futures_util::future::join_all(calls).await {
            let lease = result
                .map_err(|s| format!("acquire: {}", s.message()))?
                .into_inner()
                .lease
                .ok_or("no lease")?;
            refs.push(LeaseRef {
                name: lease.name,
                owner_token: lease.owner_token,
                ttl_ms: 0,
                ..Default::default()
            });
        }
    }
    Ok(refs)
}

/// Resident memory of a process, from /proc (Linux).
pub fn rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0)
}
