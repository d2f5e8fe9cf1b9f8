//! The Session stream pump: reads requests, runs each in a task of its own
//! (concurrently: a waiting Acquire holds up nothing behind it), and answers
//! each exactly once under its id. Transport concerns only (ids, deadlines,
//! cancellation, back-pressure, how the stream ends); what a request means
//! is `lease::Session`'s business, and what a failure says is
//! `status::session_error`'s.
//!
//! How it fails, and what each case does:
//! - The client stops reading: its answers fill the outbox, the tasks wait
//!   to hand theirs over, the requests in flight reach the cap, and the pump
//!   stops reading (HTTP/2 flow control pushes back). Nothing grows.
//! - The client floods: at most `--max-concurrent-streams` requests in
//!   flight, one heartbeat at a time (throttled to `--max-stream-rate`), each
//!   request admitted under the rate caps like a unary call.
//! - The stream breaks (reset, connection lost) or its credential is
//!   withdrawn: every request in flight is dropped, which ends an Acquire's
//!   wait and releases a grant that raced with it; a grant whose answer was
//!   queued but never sent is released too ([`Outbox`]).
//! - The client half-closes: its requests in flight are answered, then the
//!   stream ends with OK.
//! - The broker shuts down: waits end (their answers say so, with kept
//!   places), the answers are sent, then the stream ends with UNAVAILABLE;
//!   a client that reads nothing holds the shutdown up for [`DRAIN`] at most.
//! - A replayed or reused id: refused while the first is in flight.

use std::{
    collections::HashMap,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use tokio::{
    sync::{mpsc, oneshot},
    task::JoinSet,
};
use tokio_stream::Stream;
use tonic::{Status, Streaming};

use super::{
    gate::{withdrawn, StreamCredential},
    grpc::{acquire_args, lease_message},
    keepalive::heartbeat_response,
    status::session_error,
};
use crate::{
    duration::millis,
    error::{Error, Result},
    lease::{LeaseRef, Leases, Session},
    proto::{
        session_request::Request, session_response::Response, KeepAliveRequest, ReleaseResponse,
        RenewResponse, SessionRequest, SessionResponse,
    },
};

/// Answers queued per stream before the tasks that produced them wait: a
/// client that does not read slows its own stream.
const OUTBOX: usize = 64;

/// How long a shutdown waits for the requests in flight to be answered
/// before it drops them (their waits have ended; only a client that reads
/// nothing, or a silent store, takes this long).
const DRAIN: Duration = Duration::from_secs(5);

/// Starts pumping `inbound` into `session` and returns the response stream.
/// `max_in_flight`: the requests that may run at once on this stream.
pub fn start(
    leases: Leases,
    session: Session,
    inbound: Streaming<SessionRequest>,
    credential: Option<StreamCredential>,
    max_in_flight: usize,
) -> Outbox {
    let (tx, rx) = mpsc::channel(OUTBOX);
    tokio::spawn(
        Pump {
            leases,
            session: Arc::new(session),
            tx,
            running: JoinSet::new(),
            cancels: HashMap::new(),
            heartbeat: None,
            max_in_flight: max_in_flight.max(1),
        }
        .run(inbound, credential),
    );
    Outbox { rx }
}

/// One answer on its way, and the grant it carries until the client could
/// have read it: dropped undelivered (the stream broke first), it releases
/// the grant.
struct Answer {
    message: Result<SessionResponse, Status>,
    unheard: Option<Unheard>,
}

impl Answer {
    fn to(id: u64, response: Response) -> Self {
        Answer {
            message: Ok(SessionResponse {
                id,
                response: Some(response),
            }),
            unheard: None,
        }
    }

    fn error(id: u64, error: Error) -> Self {
        Answer::to(id, Response::Error(session_error(error)))
    }
}

/// A grant whose answer has not reached the client yet. Dropped armed, it
/// has the lease released in the background (`Session::release_unheard`).
struct Unheard {
    session: Arc<Session>,
    name: String,
    token: String,
    ttl_ms: u64,
}

impl Drop for Unheard {
    fn drop(&mut self) {
        let (session, name, token, ttl_ms) = (
            Arc::clone(&self.session),
            std::mem::take(&mut self.name),
            std::mem::take(&mut self.token),
            self.ttl_ms,
        );
        if token.is_empty() {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move { session.release_unheard(&name, &token, ttl_ms).await });
        }
    }
}

impl Unheard {
    /// The answer went to the transport: the client holds the lease now.
    fn heard(mut self) {
        self.token.clear();
    }
}

/// The response stream of Session. Hands each answer to tonic, and on drop
/// (the stream ended or broke) releases the grants of the answers still
/// queued: their client never heard of them.
pub struct Outbox {
    rx: mpsc::Receiver<Answer>,
}

impl Stream for Outbox {
    type Item = Result<SessionResponse, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx).map(|answer| {
            answer.map(|mut answer| {
                if let Some(unheard) = answer.unheard.take() {
                    unheard.heard();
                }
                answer.message
            })
        })
    }
}

impl Drop for Outbox {
    fn drop(&mut self) {
        // No more answers are taken; those queued drop here, releasing the
        // grants they carry.
        self.rx.close();
        while self.rx.try_recv().is_ok() {}
    }
}

/// How the reading ended.
enum End {
    /// The client half-closed: answer what is in flight, then end with OK.
    HalfClosed,
    /// The client is gone: nothing to answer.
    Gone,
    /// The stream ends with this status (a read error, a withdrawn
    /// credential), after dropping what is in flight.
    Failed(Status),
    /// The broker shuts down.
    Shutdown,
}

struct Pump {
    leases: Leases,
    session: Arc<Session>,
    tx: mpsc::Sender<Answer>,
    /// The requests in flight; each task returns its id.
    running: JoinSet<u64>,
    /// How to cancel each request in flight, by id.
    cancels: HashMap<u64, oneshot::Sender<()>>,
    /// A heartbeat that arrived while another was in flight: read no more
    /// until it can run (one heartbeat at a time, as on KeepAlive).
    heartbeat: Option<(u64, u64, KeepAliveRequest)>,
    max_in_flight: usize,
}

impl Pump {
    async fn run(
        mut self,
        mut inbound: Streaming<SessionRequest>,
        mut credential: Option<StreamCredential>,
    ) {
        let leases = self.leases.clone();
        let shutdown = leases.shutting_down();
        tokio::pin!(shutdown);
        // The id of the heartbeat in flight, if one is.
        let mut heartbeat_running: Option<u64> = None;
        let end = loop {
            let read = self.running.len() < self.max_in_flight && self.heartbeat.is_none();
            tokio::select! {
                biased;
                () = &mut shutdown => break End::Shutdown,
                status = withdrawn(&mut credential) => break End::Failed(status),
                () = self.tx.closed() => break End::Gone,
                Some(done) = self.running.join_next(), if !self.running.is_empty() => {
                    match done {
                        Ok(id) => {
                            self.cancels.remove(&id);
                            if heartbeat_running == Some(id) {
                                heartbeat_running = None;
                                if let Some((id, timeout_ms, beat)) = self.heartbeat.take() {
                                    heartbeat_running = Some(id);
                                    self.spawn_heartbeat(id, timeout_ms, beat);
                                }
                            }
                        }
                        // A task that panicked: forget the requests that
                        // are no longer in flight.
                        Err(_) => self.cancels.retain(|_, cancel| !cancel.is_closed()),
                    }
                }
                next = inbound.message(), if read => match next {
                    Ok(Some(request)) => {
                        if let Some(id) = self.dispatch(request, heartbeat_running.is_some()).await {
                            heartbeat_running = Some(id);
                        }
                    }
                    Ok(None) => break End::HalfClosed,
                    Err(status) => {
                        tracing::debug!(code = ?status.code(), message = status.message(), "Session stream ended on a read error");
                        break End::Failed(status);
                    }
                },
            }
        };
        match end {
            End::HalfClosed => {
                // (No heartbeat is parked: the pump reads only without one.)
                let tx = self.tx.clone();
                tokio::select! {
                    () = drain(&mut self.running) => {}
                    () = tx.closed() => self.running.shutdown().await,
                    () = &mut shutdown => {
                        let _ = tokio::time::timeout(DRAIN, drain(&mut self.running)).await;
                        self.running.shutdown().await;
                        let _ = self.tx.try_send(shutting_down());
                    }
                }
            }
            End::Gone => self.running.shutdown().await,
            End::Failed(status) => {
                self.running.shutdown().await;
                let _ = self.tx.try_send(Answer {
                    message: Err(status),
                    unheard: None,
                });
            }
            End::Shutdown => {
                // Waits end on their own (with their kept places); their
                // answers go out before the stream's end.
                self.heartbeat = None;
                let _ = tokio::time::timeout(DRAIN, drain(&mut self.running)).await;
                self.running.shutdown().await;
                let _ = self.tx.try_send(shutting_down());
            }
        }
        self.session.end();
    }

    /// Starts one request, or answers it at once (a refusal, a cancel).
    /// Returns the id of a heartbeat it started.
    async fn dispatch(&mut self, request: SessionRequest, beating: bool) -> Option<u64> {
        let SessionRequest {
            id,
            timeout_ms,
            request,
        } = request;
        let request = match request {
            Some(Request::Cancel(cancel)) => {
                if let Some(cancel) = self.cancels.remove(&cancel.id) {
                    let _ = cancel.send(());
                }
                return None;
            }
            Some(request) => request,
            None => {
                self.answer_now(Answer::error(
                    id,
                    Error::InvalidArgument(
                        "the request is empty: set one of acquire, renew, release, heartbeat \
                         or cancel"
                            .into(),
                    ),
                ))
                .await;
                return None;
            }
        };
        if self
            .cancels
            .get(&id)
            .is_some_and(|cancel| !cancel.is_closed())
        {
            self.answer_now(Answer::error(
                id,
                Error::InvalidArgument(format!(
                    "request id {id} is already in flight on this stream: give each request \
                     in flight its own id"
                )),
            ))
            .await;
            return None;
        }
        if let Err(refused) = self.session.admit() {
            self.answer_now(Answer::error(id, refused)).await;
            return None;
        }
        match request {
            Request::Heartbeat(beat) if beating => {
                self.heartbeat = Some((id, timeout_ms, beat));
                None
            }
            Request::Heartbeat(beat) => {
                self.spawn_heartbeat(id, timeout_ms, beat);
                Some(id)
            }
            other => {
                self.spawn(id, timeout_ms, other);
                None
            }
        }
    }

    /// Answers from the pump itself; waiting for room in the outbox is the
    /// back-pressure on a client that does not read.
    async fn answer_now(&self, answer: Answer) {
        let _ = self.tx.send(answer).await;
    }

    fn spawn_heartbeat(&mut self, id: u64, timeout_ms: u64, beat: KeepAliveRequest) {
        self.spawn(id, timeout_ms, Request::Heartbeat(beat));
    }

    /// Runs `request` in a task of its own, cancellable by id and bounded
    /// by its `timeout_ms`.
    fn spawn(&mut self, id: u64, timeout_ms: u64, request: Request) {
        let (cancel, cancelled) = oneshot::channel();
        self.cancels.insert(id, cancel);
        let (session, tx) = (Arc::clone(&self.session), self.tx.clone());
        self.running.spawn(async move {
            let work = serve(&session, id, request);
            let timeout = async {
                match timeout_ms {
                    0 => std::future::pending().await,
                    ms => tokio::time::sleep(Duration::from_millis(ms)).await,
                }
            };
            let answer = tokio::select! {
                answer = work => answer,
                // A dropped sender (the pump is gone) is no cancel: the pump
                // drops its tasks itself.
                Ok(()) = cancelled => Answer::error(id, Error::Cancelled),
                () = timeout => Answer::error(id, Error::DeadlineExceeded { timeout_ms }),
            };
            let _ = tx.send(answer).await;
            id
        });
    }
}

/// Waits for every request in flight to end.
async fn drain(running: &mut JoinSet<u64>) {
    while running.join_next().await.is_some() {}
}

fn shutting_down() -> Answer {
    Answer {
        message: Err(Status::unavailable(
            "the broker is shutting down; reconnect (to any replica) and resume your leases",
        )),
        unheard: None,
    }
}

/// One request's work and its answer.
async fn serve(session: &Arc<Session>, id: u64, request: Request) -> Answer {
    match request {
        Request::Acquire(r) => match session.acquire(acquire_args(r)).await {
            Ok(granted) => {
                let lease = lease_message(granted.lease);
                let unheard = Unheard {
                    session: Arc::clone(session),
                    name: lease.name.clone(),
                    token: lease.owner_token.clone(),
                    ttl_ms: lease.ttl_ms,
                };
                Answer {
                    unheard: Some(unheard),
                    ..Answer::to(
                        id,
                        Response::Acquire(crate::proto::AcquireResponse {
                            waited_ms: millis(granted.waited),
                            lease: Some(lease),
                        }),
                    )
                }
            }
            Err(e) => Answer::error(id, e),
        },
        Request::Renew(r) => match session.renew(&r.name, &r.owner_token, r.ttl_ms).await {
            Ok(renewed) => Answer::to(
                id,
                Response::Renew(RenewResponse {
                    ttl_ms: renewed.ttl_ms,
                    fence: renewed.fence,
                }),
            ),
            Err(e) => Answer::error(id, e),
        },
        Request::Release(r) => match session.release(&r.name, &r.owner_token).await {
            Ok(()) => Answer::to(id, Response::Release(ReleaseResponse {})),
            Err(e) => Answer::error(id, e),
        },
        Request::Heartbeat(beat) => {
            session.throttle().await;
            let seq = beat.seq;
            let refs = beat
                .leases
                .into_iter()
                .map(|l| LeaseRef {
                    name: l.name,
                    owner_token: l.owner_token,
                    ttl_ms: l.ttl_ms,
                })
                .collect();
            match session.heartbeat(refs).await {
                Ok(states) => Answer::to(id, Response::Heartbeat(heartbeat_response(seq, states))),
                Err(e) => Answer::error(id, e),
            }
        }
        Request::Cancel(_) => Answer::error(
            id,
            Error::Internal("a cancel reached a request's task".into()),
        ),
    }
}
