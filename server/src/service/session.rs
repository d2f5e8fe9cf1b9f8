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
//!   flight, and beside them one heartbeat at a time (throttled to
//!   `--max-stream-rate`; waits filling the cap never starve the renewals),
//!   each other request admitted under the rate caps like a unary call. At the
//!   cap one request waits parked and the pump reads on only for cancels;
//!   an Acquire, Renew or Release over its fields' limits is refused in the
//!   pump, so no task holds a message of up to `--max-message-size`.
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
    keepalive::beat,
    status::session_error,
};
use crate::{
    duration::millis,
    error::{Error, Result},
    lease::{Leases, Session},
    proto::{
        session_request::Request, session_response::Response, ReleaseResponse, RenewResponse,
        SessionRequest, SessionResponse,
    },
};

/// Answers queued per stream before the tasks that produced them wait: a
/// client that does not read slows its own stream.
const OUTBOX: usize = 64;

/// What an Acquire carries beyond its name and holder label, generously:
/// two 32-character tokens (owner token or place), five numbers, a flag,
/// and the tags and lengths of them all.
const SMALL_OVERHEAD: usize = 256;

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
    let small = {
        let limits = leases.limits();
        limits.max_name_len + limits.max_holder_len + SMALL_OVERHEAD
    };
    tokio::spawn(
        Pump {
            leases,
            session: Arc::new(session),
            tx,
            running: JoinSet::new(),
            cancels: HashMap::new(),
            beating: None,
            parked: None,
            small,
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
        Answer::to(id, Response::Error(Box::new(session_error(error))))
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
    /// The id of the heartbeat in flight: one at a time, as on KeepAlive.
    beating: Option<u64>,
    /// The largest Acquire, Renew or Release whose fields are all within
    /// their limits (a longest name and holder label, with room for the
    /// rest): a larger one is refused without a task of its own.
    small: usize,
    /// A request that cannot start yet (the stream is at its cap, or it is
    /// a heartbeat behind another): the pump reads on only for cancels,
    /// and reads nothing else until it starts.
    parked: Option<(u64, u64, Request)>,
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
        // A request read while another is parked: nothing more is read
        // until the parked one starts and this one is dispatched.
        let mut next: Option<SessionRequest> = None;
        let end = loop {
            if self.parked.is_none() {
                if let Some(request) = next.take() {
                    self.dispatch(request).await;
                    continue;
                }
            }
            tokio::select! {
                biased;
                () = &mut shutdown => break End::Shutdown,
                status = withdrawn(&mut credential) => break End::Failed(status),
                () = self.tx.closed() => break End::Gone,
                Some(done) = self.running.join_next(), if !self.running.is_empty() => {
                    match done {
                        Ok(id) => {
                            self.cancels.remove(&id);
                            if self.beating == Some(id) {
                                self.beating = None;
                            }
                        }
                        // A task that panicked: forget the requests that
                        // are no longer in flight.
                        Err(_) => {
                            self.cancels.retain(|_, cancel| !cancel.is_closed());
                            if self.beating.is_some_and(|id| !self.cancels.contains_key(&id)) {
                                self.beating = None;
                            }
                        }
                    }
                    if let Some((id, timeout_ms, request)) = self.parked.take() {
                        self.start(id, timeout_ms, request);
                    }
                }
                message = inbound.message(), if next.is_none() => match message {
                    // At the cap, cancels still get through: they are how
                    // a client makes room.
                    Ok(Some(SessionRequest { request: Some(Request::Cancel(cancel)), .. })) => {
                        self.cancel(cancel.id).await;
                    }
                    Ok(Some(request)) if self.parked.is_some() => next = Some(request),
                    Ok(Some(request)) => self.dispatch(request).await,
                    Ok(None) => break End::HalfClosed,
                    Err(status) => {
                        tracing::debug!(code = ?status.code(), message = status.message(), "Session stream ended on a read error");
                        break End::Failed(status);
                    }
                },
            }
        };
        // A half-closed stream has everything it sent answered, unless the
        // client leaves or the broker shuts down meanwhile.
        let end = match end {
            End::HalfClosed => {
                let tx = self.tx.clone();
                tokio::select! {
                    () = self.answer_all(next) => End::HalfClosed,
                    () = tx.closed() => End::Gone,
                    () = &mut shutdown => End::Shutdown,
                }
            }
            other => other,
        };
        match end {
            End::HalfClosed => {}
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
                self.parked = None;
                let _ = tokio::time::timeout(DRAIN, drain(&mut self.running)).await;
                self.running.shutdown().await;
                let _ = self.tx.try_send(shutting_down());
            }
        }
        self.session.end();
    }

    /// After a half-close: starts the requests read but not started yet, as
    /// room frees up, and waits for every answer.
    async fn answer_all(&mut self, mut next: Option<SessionRequest>) {
        loop {
            if let Some((id, timeout_ms, request)) = self.parked.take() {
                while self.running.len() >= self.max_in_flight || self.beating.is_some() {
                    match self.running.join_next().await {
                        Some(Ok(done)) if self.beating == Some(done) => self.beating = None,
                        Some(_) => {}
                        None => self.beating = None,
                    }
                }
                self.start(id, timeout_ms, request);
            }
            match next.take() {
                Some(request) => self.dispatch(request).await,
                None => break,
            }
        }
        drain(&mut self.running).await;
    }

    /// Takes one request: applies a cancel, answers a refusal at once, or
    /// starts it (parks it when it cannot start yet).
    async fn dispatch(&mut self, request: SessionRequest) {
        let SessionRequest {
            id,
            timeout_ms,
            request,
        } = request;
        let request = match request {
            Some(Request::Cancel(cancel)) => {
                self.cancel(cancel.id).await;
                return;
            }
            Some(request) => request,
            None => {
                self.answer_now(Answer::error(
                    id,
                    Error::bad(
                        "request",
                        "the request is empty: set one of acquire, renew, release, heartbeat \
                         or cancel",
                        vec![],
                    ),
                ))
                .await;
                return;
            }
        };
        if self
            .cancels
            .get(&id)
            .is_some_and(|cancel| !cancel.is_closed())
        {
            self.answer_now(Answer::error(
                id,
                Error::bad(
                    "request",
                    format!(
                        "request id {id} is already in flight on this stream: give each \
                         request in flight its own id"
                    ),
                    vec![],
                ),
            ))
            .await;
            return;
        }
        // Heartbeats are paced by `--max-stream-rate` (as on KeepAlive),
        // the other requests by the request-rate caps, as unary calls are.
        if !matches!(request, Request::Heartbeat(_)) {
            if let Err(refused) = self.session.admit() {
                self.answer_now(Answer::error(id, refused)).await;
                return;
            }
        }
        if !matches!(request, Request::Heartbeat(_)) && request_len(&request) > self.small {
            // Some field is over its limit: the request fails its checks
            // before it reaches the store, here, so that no task holds a
            // request of up to --max-message-size meanwhile.
            let answer = serve(&self.session, id, request).await;
            self.answer_now(answer).await;
            return;
        }
        self.start(id, timeout_ms, request);
    }

    /// Ends the request in flight with that id, if one is: a running one
    /// through its task, a parked one here (answered CANCELLED, never run).
    async fn cancel(&mut self, id: u64) {
        if let Some(cancel) = self.cancels.remove(&id) {
            let _ = cancel.send(());
        } else if self
            .parked
            .as_ref()
            .is_some_and(|(parked, ..)| *parked == id)
        {
            self.parked = None;
            self.answer_now(Answer::error(id, Error::Cancelled)).await;
        }
    }

    /// Starts `request`, or parks it while the stream is at its cap or (a
    /// heartbeat) another heartbeat is in flight.
    fn start(&mut self, id: u64, timeout_ms: u64, request: Request) {
        let heartbeat = matches!(request, Request::Heartbeat(_));
        // A heartbeat is bounded by being one at a time, not by the cap:
        // waits that fill the cap must not starve the renewals of the
        // stream's leases.
        let others = self.running.len() - usize::from(self.beating.is_some());
        let full = if heartbeat {
            self.beating.is_some()
        } else {
            others >= self.max_in_flight
        };
        if full {
            self.parked = Some((id, timeout_ms, request));
            return;
        }
        if heartbeat {
            self.beating = Some(id);
        }
        self.spawn(id, timeout_ms, request);
    }

    /// Answers from the pump itself; waiting for room in the outbox is the
    /// back-pressure on a client that does not read (but not past the
    /// broker's shutdown, which it would hold up).
    async fn answer_now(&self, answer: Answer) {
        tokio::select! {
            _ = self.tx.send(answer) => {}
            () = self.leases.shutting_down() => {}
        }
    }

    /// Runs `request` in a task of its own, cancellable by id and bounded
    /// by its `timeout_ms`.
    fn spawn(&mut self, id: u64, timeout_ms: u64, request: Request) {
        let (cancel, cancelled) = oneshot::channel();
        self.cancels.insert(id, cancel);
        let (session, tx) = (Arc::clone(&self.session), self.tx.clone());
        self.running.spawn(request_task(
            session, tx, id, timeout_ms, request, cancelled,
        ));
    }
}

/// One request's task: its work, unless cancelled or out of time first,
/// then its answer sent. Small (see [`serve`]): a task's future is copied
/// whole when spawned and when it ends.
async fn request_task(
    session: Arc<Session>,
    tx: mpsc::Sender<Answer>,
    id: u64,
    timeout_ms: u64,
    request: Request,
    cancelled: oneshot::Receiver<()>,
) -> u64 {
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
}

/// The encoded size of a request.
fn request_len(request: &Request) -> usize {
    use prost::Message;
    match request {
        Request::Acquire(r) => r.encoded_len(),
        Request::Renew(r) => r.encoded_len(),
        Request::Release(r) => r.encoded_len(),
        Request::Heartbeat(r) => r.encoded_len(),
        Request::Cancel(r) => r.encoded_len(),
    }
}

/// Waits for every request in flight to end.
async fn drain(running: &mut JoinSet<u64>) {
    while running.join_next().await.is_some() {}
}

fn shutting_down() -> Answer {
    Answer {
        message: Err(Error::Unavailable(
            "the broker is shutting down; reconnect (to any replica) and resume your leases".into(),
        )
        .into()),
        unheard: None,
    }
}

/// One request's work and its answer. Each kind's work is boxed: the
/// largest (a heartbeat's, an acquire's: store calls nested in lease rules)
/// are kilobytes, and unboxed they made every request's task as large as
/// the largest (10 kB), copied whole when spawned and again when it ended:
/// a fifth of the broker's CPU under Session load went to those copies
/// (`memmove` in a profile, 2026-12-05; BENCHMARKS.md).
async fn serve(session: &Arc<Session>, id: u64, request: Request) -> Answer {
    match request {
        Request::Acquire(r) => match Box::pin(session.acquire(acquire_args(r))).await {
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
        Request::Renew(r) => {
            match Box::pin(session.renew(&r.name, &r.owner_token, r.ttl_ms, r.ttl_auto)).await {
                Ok(renewed) => Answer::to(
                    id,
                    Response::Renew(RenewResponse {
                        ttl_ms: renewed.ttl_ms,
                        fence: renewed.fence,
                    }),
                ),
                Err(e) => Answer::error(id, e),
            }
        }
        Request::Release(r) => match Box::pin(session.release(&r.name, &r.owner_token)).await {
            Ok(()) => Answer::to(id, Response::Release(ReleaseResponse {})),
            Err(e) => Answer::error(id, e),
        },
        Request::Heartbeat(request) => {
            session.throttle().await;
            match Box::pin(beat(session, request)).await {
                Ok(answer) => Answer::to(id, Response::Heartbeat(answer)),
                Err(e) => Answer::error(id, e),
            }
        }
        Request::Cancel(_) => Answer::error(
            id,
            Error::Internal("a cancel reached a request's task".into()),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        lease::{AcquireArgs, Caller, Limits, NoEvents, Scope},
        store::Store,
    };

    /// A session over the memory store, and a lease granted on it.
    async fn granted() -> (Leases, Arc<Session>, crate::lease::Granted) {
        let leases = Leases::new(Store::memory(), Limits::default(), Arc::new(NoEvents));
        let session = Arc::new(leases.session(Caller::local(), Scope::Held).unwrap());
        let granted = session
            .acquire(AcquireArgs {
                name: "n".into(),
                ttl_ms: 60_000,
                ..Default::default()
            })
            .await
            .unwrap();
        (leases, session, granted)
    }

    fn answer(session: &Arc<Session>, granted: &crate::lease::Granted) -> Answer {
        Answer {
            unheard: Some(Unheard {
                session: Arc::clone(session),
                name: granted.lease.name.clone(),
                token: granted.lease.owner_token.clone(),
                ttl_ms: granted.lease.ttl_ms,
            }),
            ..Answer::to(1, Response::Release(ReleaseResponse {}))
        }
    }

    async fn held(leases: &Leases) -> bool {
        leases
            .describe(&Caller::local(), "", "n")
            .await
            .unwrap()
            .lease
            .is_some()
    }

    /// Waits (10 s at most) for the lease to be released.
    async fn released(leases: &Leases) {
        let wait = async {
            while held(leases).await {
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), wait)
            .await
            .expect("the grant released within 10 s");
    }

    /// A request's task is small whatever the request: a task's future is
    /// copied whole when it is spawned and again when it ends, and each
    /// request is a task (see `serve`). Unboxed, it was 10 kB.
    #[tokio::test]
    async fn a_request_task_is_small() {
        let (_leases, session, _) = granted().await;
        let (tx, _rx) = mpsc::channel(1);
        let (_cancel, cancelled) = oneshot::channel();
        let task = request_task(
            session,
            tx,
            1,
            0,
            Request::Heartbeat(Default::default()),
            cancelled,
        );
        let size = size_of_val(&task);
        assert!(size <= 1024, "a request's task is {size} bytes");
    }

    /// A grant whose answer was still queued when the stream ended is
    /// released: its client never heard of it.
    #[tokio::test]
    async fn a_grant_queued_when_the_stream_ends_is_released() {
        let (leases, session, granted) = granted().await;
        let (tx, rx) = mpsc::channel(OUTBOX);
        tx.send(answer(&session, &granted)).await.unwrap();
        drop(Outbox { rx });
        released(&leases).await;
    }

    /// A grant whose answer went to the transport stays with its client.
    #[tokio::test]
    async fn a_grant_handed_to_the_transport_stays_granted() {
        use tokio_stream::StreamExt;
        let (leases, session, granted) = granted().await;
        let (tx, rx) = mpsc::channel(OUTBOX);
        tx.send(answer(&session, &granted)).await.unwrap();
        let mut outbox = Outbox { rx };
        assert!(outbox.next().await.is_some());
        drop(outbox);
        // Whatever a release spawned would have run by now: the memory
        // store answers without yielding to the clock.
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        assert!(held(&leases).await);
    }

    /// An answer dropped before it reached the outbox (its task was
    /// cancelled with the stream) releases its grant too.
    #[tokio::test]
    async fn a_grant_dropped_on_its_way_is_released() {
        let (leases, session, granted) = granted().await;
        drop(answer(&session, &granted));
        released(&leases).await;
    }
}
