//! The client's Session stream: one stream per client carrying its
//! acquires, renewals, releases and heartbeats as messages (a message on an
//! open stream costs the broker about half of a unary call).
//!
//! A [`Link`] opens the stream on first use, on the client's current
//! broker, and again after it broke. Each request gets an id; a reader task
//! hands each answer to the request that waits for it. How it fails:
//! - The stream breaks (broker gone, connection reset): every request in
//!   flight fails with UNAVAILABLE, as a unary call whose connection broke
//!   does; the next request opens a new stream (on the next broker when the
//!   current one cannot be reached).
//! - The caller stops waiting (a timeout, a dropped future): a `cancel` goes
//!   to the broker, which ends the request (a waiting acquire leaves the
//!   line; a grant that raced with it is released); a grant answered before
//!   the cancel arrived is released by the client when its answer comes.
//! - The broker is older and has no Session call (UNIMPLEMENTED): the
//!   client uses the unary calls from then on.

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc, Mutex, PoisonError,
    },
};

use leasehold_proto::{
    session_request::Request, session_response::Response, ReleaseRequest, SessionCancel,
    SessionRequest, SessionResponse,
};
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{metadata::MetadataMap, Code, Status, Streaming};

use crate::{client::not_connected, error::PLACE_METADATA, Shared};

/// Requests queued towards the stream before a sender waits.
const QUEUE: usize = 64;

/// What answers one request.
type Waiter = oneshot::Sender<Result<Response, Status>>;

/// The client's Session stream, opened when needed.
#[derive(Default)]
pub(crate) struct Link {
    /// The stream now, if one is open.
    open: tokio::sync::Mutex<Option<Arc<Stream>>>,
    /// Set when a broker answered that it has no Session call.
    unsupported: AtomicBool,
    /// Set when the client was built to use the unary calls only.
    pub(crate) disabled: AtomicBool,
}

/// One open Session stream.
pub(crate) struct Stream {
    tx: mpsc::Sender<SessionRequest>,
    next_id: AtomicU64,
    /// Requests in flight, by id; `None` once the stream broke.
    waiting: Mutex<Option<HashMap<u64, Waiter>>>,
}

impl Stream {
    fn waiting(&self) -> std::sync::MutexGuard<'_, Option<HashMap<u64, Waiter>>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Fails every request in flight with `status`, and any sent later.
    fn broke(&self, status: &Status) {
        let waiting = self.waiting().take();
        for (_, waiter) in waiting.into_iter().flatten() {
            let _ = waiter.send(Err(broken(status)));
        }
    }

    /// Whether the stream still carries requests.
    fn alive(&self) -> bool {
        self.waiting().is_some() && !self.tx.is_closed()
    }

    /// Sends `request` and waits for its answer. Dropped before the answer,
    /// it cancels the request on the broker.
    pub(crate) async fn call(&self, timeout_ms: u64, request: Request) -> Result<Response, Status> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (waiter, answer) = oneshot::channel();
        match self.waiting().as_mut() {
            Some(waiting) => waiting.insert(id, waiter),
            None => return Err(Status::unavailable("the Session stream broke")),
        };
        let mut guard = Cancel {
            stream: self,
            id,
            armed: true,
        };
        let sent = self
            .tx
            .send(SessionRequest {
                id,
                timeout_ms,
                request: Some(request),
            })
            .await;
        if sent.is_err() {
            guard.armed = false;
            self.waiting().as_mut().map(|w| w.remove(&id));
            return Err(Status::unavailable("the Session stream broke"));
        }
        let answer = answer.await;
        guard.armed = false;
        answer.unwrap_or_else(|_| Err(Status::unavailable("the Session stream broke")))
    }
}

/// Cancels a request whose caller stopped waiting for its answer.
struct Cancel<'a> {
    stream: &'a Stream,
    id: u64,
    armed: bool,
}

impl Drop for Cancel<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Some(waiting) = self.stream.waiting().as_mut() {
            waiting.remove(&self.id);
        }
        // Best effort: a full queue means the stream is not draining, and
        // the request ends with it.
        let _ = self.stream.tx.try_send(SessionRequest {
            id: self.stream.next_id.fetch_add(1, Ordering::Relaxed),
            timeout_ms: 0,
            request: Some(Request::Cancel(SessionCancel { id: self.id })),
        });
    }
}

impl Link {
    /// The open stream, opening one (on the current broker, moving on while
    /// brokers cannot be reached) if there is none; `Ok(None)` when the
    /// unary calls are to be used (disabled, or the broker has no Session).
    pub(crate) async fn stream(&self, shared: &Shared) -> Result<Option<Arc<Stream>>, Status> {
        if self.disabled.load(Ordering::Relaxed) || self.unsupported.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let mut open = self.open.lock().await;
        if let Some(stream) = open.as_ref().filter(|s| s.alive()) {
            return Ok(Some(Arc::clone(stream)));
        }
        *open = None;
        // As `Shared::call`: move on only while no connection can be made
        // (the stream never left this process), with a new stream each try.
        let mut attempts = shared.replicas();
        let (tx, responses) = loop {
            let (index, mut broker) = shared.broker();
            let (tx, rx) = mpsc::channel(QUEUE);
            match broker.session(ReceiverStream::new(rx)).await {
                Ok(response) => break (tx, response.into_inner()),
                Err(status) if attempts > 1 && not_connected(&status) => {
                    shared.unreachable(index);
                    attempts -= 1;
                }
                Err(status) if status.code() == Code::Unimplemented => {
                    tracing::debug!("the broker has no Session call; using unary calls");
                    self.unsupported.store(true, Ordering::Relaxed);
                    return Ok(None);
                }
                Err(status) => return Err(status),
            }
        };
        let stream = Arc::new(Stream {
            tx,
            next_id: AtomicU64::new(1),
            waiting: Mutex::new(Some(HashMap::new())),
        });
        tokio::spawn(read(Arc::downgrade(&stream), responses));
        *open = Some(Arc::clone(&stream));
        Ok(Some(stream))
    }

    /// Drops `stream` (it stalled): the next request opens another.
    pub(crate) async fn discard(&self, stream: &Arc<Stream>) {
        stream.broke(&Status::unavailable("the Session stream stalled"));
        let mut open = self.open.lock().await;
        if open.as_ref().is_some_and(|s| Arc::ptr_eq(s, stream)) {
            *open = None;
        }
    }
}

/// Hands each answer to its request; when the stream ends, fails the rest.
async fn read(stream: std::sync::Weak<Stream>, mut responses: Streaming<SessionResponse>) {
    let end = loop {
        match responses.message().await {
            Ok(Some(SessionResponse { id, response })) => {
                let Some(stream) = stream.upgrade() else {
                    return;
                };
                let waiter = stream.waiting().as_mut().and_then(|w| w.remove(&id));
                match (waiter, response) {
                    (Some(waiter), response) => {
                        let _ = waiter.send(response.ok_or_else(|| {
                            Status::internal("the broker answered with an empty response")
                        }));
                    }
                    // A grant whose caller stopped waiting (its cancel
                    // crossed the grant): nobody holds it, so it is given
                    // back at once rather than held for its TTL.
                    (None, Some(Response::Acquire(granted))) => {
                        if let Some(lease) = granted.lease {
                            let _ = stream.tx.try_send(SessionRequest {
                                id: stream.next_id.fetch_add(1, Ordering::Relaxed),
                                timeout_ms: 0,
                                request: Some(Request::Release(ReleaseRequest {
                                    name: lease.name,
                                    owner_token: lease.owner_token,
                                })),
                            });
                        }
                    }
                    (None, _) => {}
                }
            }
            Ok(None) => break Status::unavailable("the broker ended the Session stream"),
            Err(status) => break status,
        }
    };
    tracing::debug!(code = ?end.code(), message = end.message(), "Session stream ended");
    if let Some(stream) = stream.upgrade() {
        stream.broke(&end);
    }
}

/// What a request in flight on a broken stream fails with: UNAVAILABLE
/// (the request may or may not have been applied), keeping the stream's
/// own status when it says more (the broker shutting down).
fn broken(status: &Status) -> Status {
    match status.code() {
        Code::Unavailable => Status::unavailable(status.message()),
        _ => Status::unavailable(format!(
            "the Session stream broke: {}: {}",
            status.code(),
            status.message()
        )),
    }
}

/// A Session stream's error as the status the unary call would have failed
/// with: its kept place in the metadata (`SessionError.place`), its reason
/// and facts in the details, so that both paths hand the caller the same.
pub(crate) fn status(error: leasehold_proto::SessionError) -> Status {
    use tonic_types::{ErrorDetails, StatusExt};
    let code = Code::from_i32(error.code);
    let mut metadata = MetadataMap::new();
    if let Ok(place) = error.place.parse() {
        if !error.place.is_empty() {
            metadata.insert(PLACE_METADATA, place);
        }
    }
    if error.reason.is_empty() {
        // A broker from before error details.
        return Status::with_metadata(code, error.message, metadata);
    }
    let mut details = ErrorDetails::with_error_info(error.reason, "leasehold.v1", error.metadata);
    if error.retry_delay_ms > 0 {
        details.set_retry_info(Some(std::time::Duration::from_millis(error.retry_delay_ms)));
    }
    Status::with_error_details_and_metadata(code, error.message, details, metadata)
}
