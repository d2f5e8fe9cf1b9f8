//! The keeper: one task per client that keeps every lease of the client
//! alive with heartbeats on the client's Session stream (or on a KeepAlive
//! stream, with unary calls), and reconnects (with backoff) when the stream
//! breaks, resuming the leases by owner token.

use std::{
    collections::BTreeMap,
    sync::{Arc, Weak},
    time::Duration,
};

use tokio::{
    sync::mpsc,
    time::{sleep, sleep_until, Instant},
};
use tokio_stream::{wrappers::ReceiverStream, Stream, StreamExt};
use tonic::Status;

use super::{Held, LossReason, Shared};
use leasehold_proto::{
    self as proto, lease_status::State, KeepAliveRequest, KeepAliveResponse, LeaseRef,
};

const MIN_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// Heartbeats never come closer together than this, whatever the TTL.
const MIN_INTERVAL: Duration = Duration::from_millis(50);
/// How often an idle keeper checks whether its client is gone.
const IDLE_CHECK: Duration = Duration::from_secs(1);

/// Runs until the client and all its leases are dropped.
pub(crate) async fn run(shared: Weak<Shared>) {
    let mut backoff = MIN_BACKOFF;
    loop {
        let Some(client) = shared.upgrade() else {
            return;
        };
        if client.snapshot().is_empty() {
            // Idle: wait for a lease without keeping the client alive.
            tokio::select! {
                () = client.added.notified() => {}
                () = sleep(IDLE_CHECK) => {}
            }
            continue;
        }
        // Room for a few beats of the largest heartbeats; more queued means
        // the stream is not draining (see `session`).
        let (tx, rx) = mpsc::channel(4 * client.snapshot().len().div_ceil(HEARTBEAT_LEASES).max(1));
        let (index, mut broker) = client.broker();
        let opened = match client.link.stream(&client).await {
            // The client's Session stream carries the heartbeats too.
            Ok(Some(stream)) => {
                let answers = beat_on(Arc::clone(&stream), rx);
                match session(&client, tx, answers).await {
                    Ended::Stalled => client.link.discard(&stream).await,
                    Ended::Over { answered: true } => backoff = MIN_BACKOFF,
                    // Not one heartbeat answered (the broker refused them,
                    // or the stream broke at once): not again at once.
                    Ended::Over { answered: false } => {
                        drop(client);
                        sleep(jitter(backoff)).await;
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                    }
                }
                continue;
            }
            Ok(None) => broker.keep_alive(ReceiverStream::new(rx)).await,
            Err(status) => Err(status),
        };
        match opened {
            Ok(response) => {
                backoff = MIN_BACKOFF;
                session(&client, tx, response.into_inner()).await;
            }
            Err(status) => {
                tracing::debug!(code = ?status.code(), message = status.message(), "KeepAlive stream failed to open");
                // Try the next replica (if any) after the backoff.
                client.unreachable(index);
                drop(client);
                sleep(jitter(backoff)).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// Most leases one heartbeat names: the broker's default
/// `--max-stream-leases`, which keeps the largest heartbeat well inside its
/// default `--max-message-size`.
const HEARTBEAT_LEASES: usize = 1_000;

/// How a heartbeat stream ended.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    /// It broke, the broker ended it, or no lease is left; `answered`:
    /// whether any heartbeat of it was answered.
    Over {
        /// Whether any heartbeat was answered.
        answered: bool,
    },
    /// Heartbeats went unanswered (or unsent) too long: the stream is taken
    /// for dead.
    Stalled,
}

/// The answers to heartbeats sent as requests on the Session `stream`, one
/// at a time (the broker runs one heartbeat of a stream at a time), in the
/// order `beats` gives them: what a KeepAlive stream would answer.
fn beat_on(
    stream: Arc<crate::session::Stream>,
    mut beats: mpsc::Receiver<KeepAliveRequest>,
) -> ReceiverStream<Result<KeepAliveResponse, Status>> {
    use leasehold_proto::{session_request::Request, session_response::Response};
    let (tx, rx) = mpsc::channel(1);
    tokio::spawn(async move {
        while let Some(beat) = beats.recv().await {
            let answer = match stream.call(0, Request::Heartbeat(beat)).await {
                Ok(Response::Heartbeat(answer)) => Ok(answer),
                Ok(Response::Error(error)) => Err(crate::session::status(*error)),
                Ok(other) => Err(Status::internal(format!(
                    "the broker answered a heartbeat with {other:?}"
                ))),
                Err(status) => Err(status),
            };
            let end = answer.is_err();
            if tx.send(answer).await.is_err() || end {
                return;
            }
        }
    });
    ReceiverStream::new(rx)
}

/// Heartbeats over one stream until it breaks, stalls, or no lease is left
/// (then it ends cleanly).
async fn session(
    shared: &Shared,
    tx: mpsc::Sender<KeepAliveRequest>,
    mut responses: impl Stream<Item = Result<KeepAliveResponse, Status>> + Unpin,
) -> Ended {
    let mut seq = 0u64;
    let mut answered = false;
    // The round trip of the last answered heartbeat, reported in the next
    // (the broker's TTL advice and ttl_auto are judged from these).
    let mut last_round_trip = Duration::ZERO;
    // The broker's TTL advice is logged once per stream.
    let mut advised = false;
    // Heartbeats awaiting their answer: seq -> (send time, leases in order).
    let mut pending: BTreeMap<u64, (Instant, Vec<Arc<Held>>)> = BTreeMap::new();
    // Beat at once: after a reconnection this resumes the leases.
    let mut next_beat = Instant::now();
    loop {
        tokio::select! {
            () = sleep_until(next_beat) => {
                let leases = live_leases(shared);
                if leases.is_empty() {
                    return Ended::Over { answered: true }; // dropping `tx` half-closes: a clean end
                }
                let interval = beat_interval(&leases);
                let now = Instant::now();
                if pending.values().next().is_some_and(|(sent, _)| now.duration_since(*sent) > (interval * 2).max(Duration::from_secs(1))) {
                    tracing::debug!("heartbeat stream stalled; reconnecting");
                    return Ended::Stalled;
                }
                // Several heartbeats when the leases are more than one may
                // name (the broker's --max-stream-leases).
                for chunk in leases.chunks(HEARTBEAT_LEASES) {
                    seq += 1;
                    let request = KeepAliveRequest {
                        seq,
                        leases: chunk
                            .iter()
                            .map(|h| LeaseRef {
                                name: h.name.clone(),
                                owner_token: h.token.clone(),
                                ttl_ms: 0,
                                ttl_auto: h.ttl_auto,
                            })
                            .collect(),
                        last_round_trip_us: u64::try_from(last_round_trip.as_micros()).unwrap_or(u64::MAX),
                    };
                    if tx.try_send(request).is_err() {
                        tracing::debug!("heartbeat stream not draining; reconnecting");
                        return Ended::Stalled;
                    }
                    pending.insert(seq, (now, chunk.to_vec()));
                }
                next_beat = now + interval;
            }
            message = responses.next() => match message {
                Some(Ok(response)) => {
                    answered = true;
                    if let Some(sent) = pending.get(&response.seq).map(|(sent, _)| *sent) {
                        last_round_trip = sent.elapsed();
                    }
                    shared.advised(response.advice.clone(), &mut advised);
                    apply(shared, &mut pending, response);
                    // A renewal may have shortened a TTL (ttl_auto): the
                    // next heartbeat comes within a third of the new one.
                    next_beat = next_beat.min(Instant::now() + beat_interval(&shared.snapshot()));
                }
                None => return Ended::Over { answered },
                Some(Err(status)) => {
                    tracing::debug!(code = ?status.code(), message = status.message(), "heartbeat stream ended");
                    return Ended::Over { answered };
                }
            },
            () = shared.added.notified() => {
                // A new lease may have a shorter TTL than the current beat.
                let leases = shared.snapshot();
                next_beat = next_beat.min(Instant::now() + beat_interval(&leases));
            }
        }
    }
}

/// The registered leases still alive; lost ones (or ones past their local
/// deadline) are dropped from the registry and, best effort, released so the
/// next holder need not wait for their TTL.
fn live_leases(shared: &Shared) -> Vec<Arc<Held>> {
    let mut live = Vec::new();
    for held in shared.snapshot() {
        match held.loss() {
            None => live.push(held),
            Some(reason) => {
                shared.forget(&held);
                if reason == LossReason::DeadlinePassed {
                    let (_, mut broker) = shared.broker();
                    let (name, owner_token) = (held.name.clone(), held.token.clone());
                    tokio::spawn(async move {
                        let _ = broker
                            .release(proto::ReleaseRequest { name, owner_token })
                            .await;
                    });
                }
            }
        }
    }
    live
}

/// A third of the shortest TTL.
fn beat_interval(leases: &[Arc<Held>]) -> Duration {
    leases
        .iter()
        .map(|h| h.ttl() / 3)
        .min()
        .unwrap_or(Duration::from_secs(1))
        .max(MIN_INTERVAL)
}

fn apply(
    shared: &Shared,
    pending: &mut BTreeMap<u64, (Instant, Vec<Arc<Held>>)>,
    response: KeepAliveResponse,
) {
    let Some((sent, leases)) = pending.remove(&response.seq) else {
        return;
    };
    // Answers come in order: older heartbeats still pending got none.
    pending.retain(|&seq, _| seq > response.seq);
    for (held, status) in leases.iter().zip(response.leases) {
        if status.name != held.name {
            continue;
        }
        let reason = match status.state() {
            State::Alive => {
                held.renewed(sent, status.ttl_ms);
                continue;
            }
            State::Unconfirmed | State::Unspecified => continue,
            State::Rejected => {
                tracing::warn!(lock = %held.name, message = %status.message, "broker rejected a lease");
                LossReason::Expired
            }
            State::Lost => match status.reason() {
                proto::LossReason::NotOwner => LossReason::NotOwner,
                proto::LossReason::StoreLost => LossReason::StoreLost,
                proto::LossReason::Revoked => LossReason::Revoked,
                // Gone before our own (early) deadline: it cannot have
                // expired, so the store lost it. The broker cannot always
                // tell (e.g. on a stream's first heartbeat); we can.
                proto::LossReason::Expired | proto::LossReason::Unspecified
                    if Instant::now() < *held.deadline.borrow() =>
                {
                    LossReason::StoreLost
                }
                proto::LossReason::Expired | proto::LossReason::Unspecified => LossReason::Expired,
            },
        };
        held.mark_lost(reason);
        shared.forget(held);
    }
}

/// `d` scaled by a random factor in [0.5, 1.5), so clients that lost the same
/// broker do not reconnect in lockstep.
fn jitter(d: Duration) -> Duration {
    let mut byte = [0u8; 1];
    let _ = getrandom::fill(&mut byte);
    d.mul_f64(0.5 + f64::from(byte[0]) / 256.0)
}
