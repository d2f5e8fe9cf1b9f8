//! `leasehold health`: asks a broker's standard gRPC health service
//! (`grpc.health.v1.Health/Check`, service `""`) and exits 0 or 1, for a
//! Docker HEALTHCHECK and for exec probes where the kubelet cannot reach the
//! port (a sidecar listening on 127.0.0.1).
//!
//! Why the default accepts NOT_SERVING: the broker reports NOT_SERVING while
//! it cannot reach its store, and every broker on that store does so at the
//! same moment. A check that failed then would mark every container
//! unhealthy (Swarm restarts them, which cannot fix Redis) or pull every app
//! pod with a sidecar out of its Service, for a blip the broker rides out by
//! itself. An answer of any status proves what such a check is for: the
//! process runs and serves gRPC. `--store` asks for SERVING as well, for a
//! caller that means "can take leases now".

use std::{process::ExitCode, time::Duration};

use tonic::transport::Channel;
use tonic_health::pb::{
    health_check_response::ServingStatus, health_client::HealthClient, HealthCheckRequest,
};

use super::BrokerArgs;
use leasehold_server::duration::parse_duration;

/// `leasehold health`: is the broker up (and, with --store, serving)?
#[derive(clap::Args, Debug)]
pub struct HealthArgs {
    #[command(flatten)]
    broker: BrokerArgs,
    /// Also require the store: exit 1 unless the broker reports SERVING
    /// (it reports NOT_SERVING while it cannot reach its store). Without it, any
    /// answer counts: the broker process runs and serves.
    #[arg(long)]
    store: bool,
    /// How long the answer may take, connecting included.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    timeout: Duration,
}

/// Exits 0 if the broker (the first --broker URL) answers the health check
/// (with --store: answers SERVING), 1 if not, saying which on stdout.
pub async fn health(args: HealthArgs) -> ExitCode {
    let unhealthy = ExitCode::from(1);
    let Some(url) = args.broker.urls().into_iter().next() else {
        eprintln!("leasehold: no broker URL given");
        return unhealthy;
    };
    let Ok(tls) = args.broker.tls() else {
        return unhealthy; // said why
    };
    let endpoint = match Channel::from_shared(url.clone()) {
        Ok(endpoint) => endpoint.connect_timeout(args.timeout),
        Err(e) => {
            eprintln!("leasehold: bad broker URL '{url}': {e}");
            return unhealthy;
        }
    };
    let endpoint = if url.starts_with("https://") {
        match endpoint.tls_config(leasehold_client::ClientTls::config(Some(&tls))) {
            Ok(endpoint) => endpoint,
            Err(e) => {
                eprintln!("leasehold: TLS settings for '{url}': {e}");
                return unhealthy;
            }
        }
    } else {
        endpoint
    };
    let check = async {
        let channel = endpoint.connect().await.map_err(|e| e.to_string())?;
        HealthClient::new(channel)
            .check(HealthCheckRequest {
                service: String::new(),
            })
            .await
            .map(|r| r.into_inner().status())
            .map_err(|s| format!("{:?}: {}", s.code(), s.message()))
    };
    let status = match tokio::time::timeout(args.timeout, check).await {
        Ok(Ok(status)) => status,
        Ok(Err(e)) => {
            println!("broker={url} status=UNREACHABLE error={e:?}");
            return unhealthy;
        }
        Err(_) => {
            println!(
                "broker={url} status=UNREACHABLE error=\"no answer within {}\"",
                leasehold_server::duration::format_duration(args.timeout)
            );
            return unhealthy;
        }
    };
    println!("broker={url} status={}", status.as_str_name());
    match status {
        ServingStatus::Serving => ExitCode::SUCCESS,
        ServingStatus::NotServing if !args.store => ExitCode::SUCCESS,
        _ => unhealthy,
    }
}
