//! The KeepAlive stream pump: reads heartbeats, hands them to the session,
//! writes the answers. Transport concerns only (back-pressure, shutdown, how
//! the stream ended); what a heartbeat means is `lease::Session`'s business.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

use super::gate::{withdrawn, StreamCredential};
use crate::{
    duration::millis,
    error::Result,
    lease::{LeaseRef, LeaseState, Leases, LossReason, Session},
    proto::{self, lease_status::State, KeepAliveRequest, KeepAliveResponse, LeaseStatus},
};

/// Answers queued per stream before the pump stops reading: a client that
/// does not read its answers slows its own stream, and nothing grows.
const OUTBOX: usize = 4;

/// The response stream type of KeepAlive.
pub type ResponseStream = ReceiverStream<Result<KeepAliveResponse, Status>>;

/// Starts pumping `inbound` into `session` and returns the response stream.
pub fn start(
    leases: Leases,
    session: Session,
    inbound: Streaming<KeepAliveRequest>,
    credential: Option<StreamCredential>,
) -> ResponseStream {
    let (tx, rx) = mpsc::channel(OUTBOX);
    tokio::spawn(pump(leases, session, inbound, credential, tx));
    ReceiverStream::new(rx)
}

async fn pump(
    leases: Leases,
    session: Session,
    mut inbound: Streaming<KeepAliveRequest>,
    mut credential: Option<StreamCredential>,
    tx: mpsc::Sender<Result<KeepAliveResponse, Status>>,
) {
    let shutdown = leases.shutting_down();
    tokio::pin!(shutdown);
    loop {
        let next = tokio::select! {
            () = session.throttle() => tokio::select! {
                next = inbound.message() => next,
                () = &mut shutdown => break,
                status = withdrawn(&mut credential) => {
                    // Its leases run out at their TTL, as for any broken
                    // stream.
                    let _ = tx.try_send(Err(status));
                    return session.end();
                }
            },
            () = &mut shutdown => break,
        };
        let request = match next {
            Ok(Some(request)) => request,
            Ok(None) => return session.end(),
            Err(status) => {
                // The client went away, or sent something unreadable (a
                // message over the size limit...): tell it, if it still
                // listens, rather than end the stream without a word.
                tracing::debug!(code = ?status.code(), message = status.message(), "KeepAlive stream ended on a read error");
                let _ = tx.try_send(Err(status));
                return session.end();
            }
        };
        let answer = beat(&session, request).await.map_err(Status::from);
        let fatal = answer.is_err();
        let sent = tokio::select! {
            sent = tx.send(answer) => sent.is_ok(),
            () = &mut shutdown => break,
        };
        if !sent || fatal {
            return session.end();
        }
    }
    // Shutting down: tell the client to go elsewhere. Its leases stay alive
    // in the store for their TTL, for it to resume on another replica.
    let _ = tx.try_send(Err(crate::Error::Unavailable(
        "the broker is shutting down; reconnect (to any replica) and resume your leases".into(),
    )
    .into()));
}

/// Renews the leases of one heartbeat (on a KeepAlive or a Session
/// stream) and says what became of each; fails when the heartbeat breaks a
/// stream limit.
pub(super) async fn beat(
    session: &Session,
    request: KeepAliveRequest,
) -> Result<KeepAliveResponse> {
    let refs = request
        .leases
        .into_iter()
        .map(|l| LeaseRef {
            name: l.name,
            owner_token: l.owner_token,
            ttl_ms: l.ttl_ms,
            ttl_auto: l.ttl_auto,
        })
        .collect();
    let reported =
        (request.last_round_trip_us > 0).then(|| Duration::from_micros(request.last_round_trip_us));
    let beat = session.heartbeat(refs, reported).await?;
    Ok(KeepAliveResponse {
        seq: request.seq,
        leases: beat
            .states
            .into_iter()
            .map(|(name, state)| status(name, state))
            .collect(),
        advice: beat.advice.map(|advice| proto::TtlAdvice {
            round_trip_p99_us: micros(advice.round_trip_p99),
            shortest_ttl_ms: millis(advice.shortest_ttl),
            suggested_ttl_ms: millis(advice.suggested_ttl),
            leases_below: advice.leases_below,
            message: advice.message(),
        }),
    })
}

fn status(name: String, state: LeaseState) -> LeaseStatus {
    let mut s = LeaseStatus {
        name,
        ..Default::default()
    };
    match state {
        LeaseState::Alive { ttl_ms, fence } => {
            s.set_state(State::Alive);
            s.ttl_ms = ttl_ms;
            s.fence = fence;
        }
        LeaseState::Lost {
            reason,
            fence,
            message,
        } => {
            s.set_state(State::Lost);
            s.set_reason(match reason {
                LossReason::Expired => proto::LossReason::Expired,
                LossReason::NotOwner => proto::LossReason::NotOwner,
                LossReason::StoreLost => proto::LossReason::StoreLost,
                LossReason::Revoked => proto::LossReason::Revoked,
            });
            s.fence = fence;
            s.message = message;
        }
        LeaseState::Unconfirmed { message } => {
            s.set_state(State::Unconfirmed);
            s.message = message;
        }
        LeaseState::Rejected { message } => {
            s.set_state(State::Rejected);
            s.message = message;
        }
    }
    s
}

/// A duration in whole microseconds, saturating.
fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}
