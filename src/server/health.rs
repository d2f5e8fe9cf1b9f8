//! Keeps the standard gRPC health status in step with the store: SERVING
//! while the store answers, NOT_SERVING while it does not, so that Kubernetes
//! probes and load balancers route around a broker that cannot reach Redis.

use std::time::Duration;

use tokio::sync::watch;
use tonic_health::{server::HealthReporter, ServingStatus};

use crate::lease::Leases;

/// The gRPC service names whose health this reports: the whole server ("")
/// and the Leasehold API.
const SERVICES: [&str; 2] = ["", "leasehold.v1.Leasehold"];

/// Pings the store every `interval` (each ping bounded by the store timeout)
/// until `stop` turns true.
pub async fn watch_store(
    leases: Leases,
    reporter: HealthReporter,
    interval: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut last: Option<bool> = None;
    loop {
        let result = tokio::select! {
            result = leases.store().ping() => result,
            _ = stop.wait_for(|s| *s) => return,
        };
        let up = result.is_ok();
        if last != Some(up) {
            let status = if up {
                ServingStatus::Serving
            } else {
                ServingStatus::NotServing
            };
            for service in SERVICES {
                reporter.set_service_status(service, status).await;
            }
            leases.metrics().store_up.set(i64::from(up));
            match result {
                Ok(()) => tracing::info!("store reachable: serving"),
                Err(e) => tracing::warn!(error = %e, "store unreachable: not serving"),
            }
            last = Some(up);
        }
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}
