//! The `leasehold.v1.LeaseholdService` gRPC service: converts messages and
//! calls the lease rules. No store access and no decisions here.

use crate::duration::millis;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::{
    gate::{self, Gate},
    keepalive, session,
};
use crate::{
    lease::{AcquireArgs, Leader, Leases, ListArgs, ListedLock as Listed, PlaceArgs, Scope},
    proto::{
        leasehold_service_server::LeaseholdService, AcquireRequest, AcquireResponse,
        CampaignRequest, CampaignResponse, CheckFenceRequest, CheckFenceResponse, DescribeRequest,
        DescribeResponse, KeepAliveRequest, LeaderRequest, LeaderResponse, Lease, ListRequest,
        ListResponse, ListedLock, ObserveRequest, ObserveResponse, ReleaseRequest, ReleaseResponse,
        RenewRequest, RenewResponse, ResignRequest, ResignResponse, RevokeRequest, RevokeResponse,
        SessionRequest,
    },
};

/// The service over the lease rules: the implementation of the generated
/// `LeaseholdService` trait (hence not that name).
pub struct LeaseholdApi {
    leases: Leases,
    gate: Arc<Gate>,
    /// Requests that may run at once on one Session stream: the bound on a
    /// connection's calls in flight (`--max-concurrent-streams`).
    max_in_flight: usize,
}

impl LeaseholdApi {
    /// Serves `leases` to the callers `gate` lets in; a Session stream
    /// runs at most `max_in_flight` requests at once.
    pub fn new(leases: Leases, gate: Arc<Gate>, max_in_flight: usize) -> Self {
        LeaseholdApi {
            leases,
            gate,
            max_in_flight,
        }
    }
}

#[tonic::async_trait]
impl LeaseholdService for LeaseholdApi {
    type KeepAliveStream = keepalive::ResponseStream;

    async fn keep_alive(
        &self,
        request: Request<Streaming<KeepAliveRequest>>,
    ) -> Result<Response<Self::KeepAliveStream>, Status> {
        let caller = self.gate.caller(&request)?;
        let credential = self.gate.stream_credential(&request, &caller);
        let session = self.leases.session(caller, Scope::Named)?;
        Ok(Response::new(keepalive::start(
            self.leases.clone(),
            session,
            request.into_inner(),
            credential,
        )))
    }

    type SessionStream = session::Outbox;

    async fn session(
        &self,
        request: Request<Streaming<SessionRequest>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        let caller = self.gate.caller(&request)?;
        let credential = self.gate.stream_credential(&request, &caller);
        let session = self.leases.session(caller, Scope::Held)?;
        Ok(Response::new(session::start(
            self.leases.clone(),
            session,
            request.into_inner(),
            credential,
            self.max_in_flight,
        )))
    }

    async fn acquire(
        &self,
        request: Request<AcquireRequest>,
    ) -> Result<Response<AcquireResponse>, Status> {
        let caller = self.gate.caller(&request)?;
        let r = request.into_inner();
        let granted = self.leases.acquire(&caller, acquire_args(r)).await?;
        Ok(Response::new(AcquireResponse {
            waited_ms: millis(granted.waited),
            lease: Some(lease_message(granted.lease)),
        }))
    }

    async fn renew(
        &self,
        request: Request<RenewRequest>,
    ) -> Result<Response<RenewResponse>, Status> {
        let caller = self.gate.caller(&request)?;
        let r = request.into_inner();
        let renewed = self
            .leases
            .renew(&caller, &r.name, &r.owner_token, r.ttl_ms, r.ttl_auto)
            .await?;
        Ok(Response::new(RenewResponse {
            ttl_ms: renewed.ttl_ms,
            fence: renewed.fence,
        }))
    }

    async fn release(
        &self,
        request: Request<ReleaseRequest>,
    ) -> Result<Response<ReleaseResponse>, Status> {
        let caller = self.gate.caller(&request)?;
        let r = request.into_inner();
        self.leases
            .release(&caller, &r.name, &r.owner_token)
            .await?;
        Ok(Response::new(ReleaseResponse {}))
    }

    async fn describe(
        &self,
        request: Request<DescribeRequest>,
    ) -> Result<Response<DescribeResponse>, Status> {
        let caller = self.gate.caller(&request)?;
        let r = request.into_inner();
        let d = self.leases.describe(&caller, &r.tenant, &r.name).await?;
        let local_waiters = u32::try_from(d.local_waiters).unwrap_or(u32::MAX);
        Ok(Response::new(match d.lease {
            Some(l) => DescribeResponse {
                held: true,
                holder: l.holder,
                fence: l.fence,
                remaining_ms: l.remaining_ms,
                ttl_ms: l.ttl_ms,
                granted_at_unix_ms: l.granted_at_unix_ms,
                local_waiters,
                lock_delay_ms: l.lock_delay_ms,
                lock_delay_remaining_ms: 0,
                waiters: d.waiters,
                permits_held: d.permits,
            },
            None => DescribeResponse {
                local_waiters,
                lock_delay_remaining_ms: d.lock_delay_remaining_ms,
                waiters: d.waiters,
                permits_held: d.permits,
                ..Default::default()
            },
        }))
    }

    async fn list(&self, request: Request<ListRequest>) -> Result<Response<ListResponse>, Status> {
        let caller = self.gate.caller(&request)?;
        let r = request.into_inner();
        let page = self
            .leases
            .list(
                &caller,
                &ListArgs {
                    prefix: r.prefix,
                    tenant: r.tenant,
                    page_size: r.page_size,
                    page_token: r.page_token,
                },
            )
            .await?;
        Ok(Response::new(ListResponse {
            locks: page.locks.into_iter().map(listed_message).collect(),
            next_page_token: page.next_page_token,
        }))
    }

    async fn check_fence(
        &self,
        request: Request<CheckFenceRequest>,
    ) -> Result<Response<CheckFenceResponse>, Status> {
        let caller = self.gate.caller(&request)?;
        let r = request.into_inner();
        let (current, current_fence) = self.leases.check_fence(&caller, &r.name, r.fence).await?;
        Ok(Response::new(CheckFenceResponse {
            current,
            current_fence,
        }))
    }

    async fn campaign(
        &self,
        request: Request<CampaignRequest>,
    ) -> Result<Response<CampaignResponse>, Status> {
        let caller = self.gate.caller(&request)?;
        let r = request.into_inner();
        let granted = self
            .leases
            .campaign(
                &caller,
                &r.election,
                &r.value,
                (r.ttl_ms, r.wait_timeout_ms),
                PlaceArgs {
                    keep: r.keep_place,
                    given: r.place,
                },
            )
            .await?;
        Ok(Response::new(CampaignResponse {
            waited_ms: millis(granted.waited),
            lease: Some(lease_message(granted.lease)),
        }))
    }

    async fn leader(
        &self,
        request: Request<LeaderRequest>,
    ) -> Result<Response<LeaderResponse>, Status> {
        let caller = self.gate.caller(&request)?;
        let leader = self
            .leases
            .leader(&caller, &request.into_inner().election)
            .await?;
        Ok(Response::new(leader_message(leader)))
    }

    type ObserveStream = ReceiverStream<Result<ObserveResponse, Status>>;

    async fn observe(
        &self,
        request: Request<ObserveRequest>,
    ) -> Result<Response<Self::ObserveStream>, Status> {
        let caller = self.gate.caller(&request)?;
        let mut credential = self.gate.stream_credential(&request, &caller);
        let mut observer = self
            .leases
            .observe(&caller, &request.into_inner().election)
            .await?;
        // One change in flight at most: a slow reader slows its own stream.
        let (tx, rx) = mpsc::channel(1);
        tokio::spawn(async move {
            loop {
                let change = tokio::select! {
                    change = observer.next() => change,
                    status = gate::withdrawn(&mut credential) => {
                        let _ = tx.send(Err(status)).await;
                        return;
                    }
                    () = tx.closed() => return,
                };
                let end = change.is_err();
                if tx
                    .send(change.map(observation).map_err(Status::from))
                    .await
                    .is_err()
                    || end
                {
                    return;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn resign(
        &self,
        request: Request<ResignRequest>,
    ) -> Result<Response<ResignResponse>, Status> {
        let caller = self.gate.caller(&request)?;
        let r = request.into_inner();
        self.leases
            .release(&caller, &r.election, &r.owner_token)
            .await?;
        Ok(Response::new(ResignResponse {}))
    }

    async fn revoke(
        &self,
        request: Request<RevokeRequest>,
    ) -> Result<Response<RevokeResponse>, Status> {
        let caller = self.gate.caller(&request)?;
        let r = request.into_inner();
        let fence = self.leases.revoke(&caller, &r.tenant, &r.name).await?;
        Ok(Response::new(RevokeResponse { fence }))
    }
}

/// What an AcquireRequest asks of the lease rules (unary or on a Session
/// stream).
pub(super) fn acquire_args(r: AcquireRequest) -> AcquireArgs {
    AcquireArgs {
        name: r.name,
        ttl_ms: r.ttl_ms,
        ttl_auto: r.ttl_auto,
        holder: r.holder,
        wait_timeout_ms: r.wait_timeout_ms,
        lock_delay_ms: r.lock_delay_ms,
        limit: r.limit,
        keep_place: r.keep_place,
        place: r.place,
    }
}

pub(super) fn lease_message(lease: crate::lease::GrantedLease) -> Lease {
    Lease {
        name: lease.name,
        owner_token: lease.owner_token,
        fence: lease.fence,
        ttl_ms: lease.ttl_ms,
    }
}

fn leader_message(leader: Option<Leader>) -> LeaderResponse {
    match leader {
        Some(l) => LeaderResponse {
            present: true,
            value: l.value,
            term: l.term,
            remaining_ms: l.remaining_ms,
        },
        None => LeaderResponse::default(),
    }
}

/// Observe's message: Leader's answer under its own name (buf's rule that
/// every call has its own request and response types, so that either can
/// grow alone).
fn observation(leader: Option<Leader>) -> ObserveResponse {
    let LeaderResponse {
        present,
        value,
        term,
        remaining_ms,
    } = leader_message(leader);
    ObserveResponse {
        present,
        value,
        term,
        remaining_ms,
    }
}

/// A listed name as the proto's `ListedLock`.
fn listed_message(l: Listed) -> ListedLock {
    let d = l.described;
    let mut listed = ListedLock {
        name: l.name,
        tenant: l.tenant,
        waiters: d.waiters,
        permits_held: d.permits,
        lock_delay_remaining_ms: d.lock_delay_remaining_ms,
        ..Default::default()
    };
    if let Some(lease) = d.lease {
        listed.held = true;
        listed.holder = lease.holder;
        listed.fence = lease.fence;
        listed.remaining_ms = lease.remaining_ms;
        listed.ttl_ms = lease.ttl_ms;
        listed.granted_at_unix_ms = lease.granted_at_unix_ms;
    }
    listed
}
