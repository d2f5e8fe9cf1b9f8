//! `GET /v1/status`: what the status page shows beside the listing: the
//! store's health as the gRPC health service reports it (and why not
//! serving, when the broker knows), the broker's version, and the newest
//! leases lost, of the caller's tenant (every tenant's for an
//! administrator). Authenticated and admitted like every call.

use http_body_util::Full;
use hyper::{body::Bytes, Response, StatusCode};
use serde_json::json;
use tonic_health::{
    pb::{health_check_response::ServingStatus, health_server::Health, HealthCheckRequest},
    server::HealthService,
};

use super::{
    answer::{json, refusal},
    Call, Gateway,
};
use crate::{error::Error, lease::ROOT_TENANT};

/// The status JSON for `call`'s caller.
pub async fn answer(gateway: &Gateway, call: &Call) -> Response<Full<Bytes>> {
    // Admitted like every call (its rate caps)...
    let (tenant, admin) = match gateway.gate.caller(&call.request(())) {
        Ok(caller) => (caller.tenant().id().to_owned(), caller.permissions().admin),
        // ... but while the store is refused as unsafe, when every call
        // fails UNAVAILABLE, the status says why rather than failing: that
        // is when an operator looks. The caller is known (the gate read
        // its credential before); without authentication it is the root
        // namespace's, an administrator with --enable-revoke, as the gate
        // makes it.
        Err(Error::Unavailable(_)) => match &call.grant {
            Some(grant) => (grant.tenant.clone(), grant.permissions.admin),
            None => (ROOT_TENANT.to_owned(), gateway.gate.enable_revoke),
        },
        Err(e) => return refusal(&tonic::Status::from(e)).into(),
    };
    let (serving, why) = store_health(&gateway.health).await;
    let why = match (serving, gateway.refusal.check()) {
        (true, _) => String::new(),
        (false, Err(refused)) => refused.to_string(),
        (false, Ok(())) if why.is_empty() => "the store does not answer the broker's pings, or \
                                              takes no writes (a replica, a standby, a server \
                                              set read-only): the broker's log says which"
            .to_owned(),
        (false, Ok(())) => why,
    };
    let losses: Vec<_> = gateway
        .leases
        .recent_losses()
        .list((!admin).then_some(tenant.as_str()))
        .into_iter()
        .map(|loss| {
            json!({
                "name": loss.name,
                "tenant": loss.tenant,
                "reason": loss.reason.as_str(),
                // A 64-bit integer as a string, as in the API's messages.
                "atUnixMs": loss.at_unix_ms.to_string(),
            })
        })
        .collect();
    let body = json!({
        "version": env!("CARGO_PKG_VERSION"),
        "store": { "serving": serving, "message": why },
        "tenant": tenant,
        "admin": admin,
        "recentLosses": losses,
    });
    json(
        StatusCode::OK,
        &serde_json::to_vec(&body).unwrap_or_default(),
    )
}

/// Whether the health service says the broker is serving, and, when it has
/// no status yet, why.
async fn store_health(health: &HealthService) -> (bool, String) {
    let asked = health
        .check(tonic::Request::new(HealthCheckRequest {
            service: String::new(),
        }))
        .await;
    match asked {
        Ok(answer) => (
            answer.into_inner().status == ServingStatus::Serving as i32,
            String::new(),
        ),
        Err(_) => (
            false,
            "the broker has not heard from the store yet (starting)".to_owned(),
        ),
    }
}
