//! `leasehold-bench keepalive`: heartbeat round trips on one KeepAlive
//! stream of a running broker.

use std::{
    process::ExitCode,
    time::{Duration, Instant},
};

use leasehold_proto::{
    lease_status::State, leasehold_service_client::LeaseholdServiceClient, AcquireRequest,
    KeepAliveRequest, Lease, LeaseRef, ReleaseRequest,
};
use leasehold_server::duration::parse_duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

use crate::{
    stats::{micros, percentile},
    EXIT_BROKER_ERROR,
};

/// Arguments of `bench keepalive`.
#[derive(clap::Args, Debug)]
pub struct KeepaliveArgs {
    /// The broker's URL (`http://` only: the bench measures the broker, not
    /// TLS).
    #[arg(long, default_value = "http://127.0.0.1:7420")]
    broker: String,
    /// Leases on the stream (comma-separated for several runs, e.g. `1,1000`).
    #[arg(long, default_value = "1,1000", value_delimiter = ',')]
    leases: Vec<usize>,
    /// How long to send heartbeats, per run.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    duration: Duration,
}

/// Runs the benchmark.
pub async fn keepalive(args: KeepaliveArgs) -> ExitCode {
    let mut grpc = match connect(&args.broker).await {
        Ok(g) => g,
        Err(e) => {
            eprintln!(
                "leasehold-bench: cannot reach the broker at {}: {e}",
                args.broker
            );
            return ExitCode::from(EXIT_BROKER_ERROR);
        }
    };
    println!(
        "{:>8} {:>8} {:>10} {:>10} {:>10} {:>12}",
        "leases", "beats", "p50_us", "p99_us", "max_us", "renewals/s"
    );
    for &n in &args.leases {
        match keepalive_run(&mut grpc, n, args.duration).await {
            Ok(()) => {}
            Err(e) => {
                eprintln!("leasehold-bench keepalive: {e}");
                return ExitCode::from(EXIT_BROKER_ERROR);
            }
        }
    }
    ExitCode::SUCCESS
}

async fn keepalive_run(
    grpc: &mut LeaseholdServiceClient<Channel>,
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
                ..Default::default()
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
            ..Default::default()
        })
        .collect();

    let (tx, rx) = mpsc::channel(1);
    let mut responses = grpc
        .keep_alive(ReceiverStream::new(rx))
        .await
        .map_err(|s| format!("keep_alive: {}", s.message()))?
        .into_inner();
    let mut rtts: Vec<u64> = Vec::new();
    let started = Instant::now();
    let mut seq = 0u64;
    // Each heartbeat reports the one before's round trip, as the clients
    // do (the broker's TTL advice is judged from these).
    let mut last_round_trip_us = 0;
    // The first 10 heartbeats warm up connections and caches; not counted.
    while seq < 10 || started.elapsed() < duration {
        seq += 1;
        let sent = Instant::now();
        tx.send(KeepAliveRequest {
            seq,
            leases: refs.clone(),
            last_round_trip_us,
        })
        .await
        .map_err(|_| "the stream closed".to_owned())?;
        let response = responses
            .message()
            .await
            .map_err(|s| format!("heartbeat: {}", s.message()))?
            .ok_or("the stream ended")?;
        let rtt = sent.elapsed();
        last_round_trip_us = u64::try_from(rtt.as_micros()).unwrap_or(u64::MAX);
        if let Some(bad) = response.leases.iter().find(|s| s.state() != State::Alive) {
            return Err(format!(
                "lease {} not alive: {:?} {}",
                bad.name,
                bad.state(),
                bad.message
            ));
        }
        if seq > 10 {
            rtts.push(micros(rtt));
        }
    }
    drop(tx);
    let elapsed = started.elapsed().as_secs_f64();
    println!(
        "{:>8} {:>8} {:>10} {:>10} {:>10} {:>12.0}",
        n,
        rtts.len(),
        percentile(&mut rtts, 0.50),
        percentile(&mut rtts, 0.99),
        percentile(&mut rtts, 1.0),
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

/// A plain channel to `url`, Nagle off.
async fn connect(url: &str) -> Result<LeaseholdServiceClient<Channel>, tonic::transport::Error> {
    let channel = tonic::transport::Endpoint::from_shared(url.to_owned())?
        .connect_timeout(Duration::from_secs(5))
        .tcp_nodelay(true)
        .connect()
        .await?;
    Ok(LeaseholdServiceClient::new(channel))
}
