//! A load generator's Session stream: acquires and releases of many workers
//! as messages on one stream (or one per worker), each answered by id. The
//! leanest client of the Session call, so that the figures measure the
//! broker, not a client library (`floor` measures the library).

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex, PoisonError,
    },
};

use leasehold_proto::{
    session_request::Request, session_response::Response, AcquireRequest, KeepAliveRequest,
    KeepAliveResponse, Lease, ReleaseRequest, SessionRequest, SessionResponse,
};
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;

use crate::broker::BenchClient;

/// Requests queued towards the stream before a worker waits.
const QUEUE: usize = 1_024;

type Waiting = Mutex<HashMap<u64, oneshot::Sender<Response>>>;

/// One Session stream shared by the workers that hold it.
pub struct SessionLink {
    tx: mpsc::Sender<SessionRequest>,
    next_id: AtomicU64,
    waiting: Arc<Waiting>,
}

impl SessionLink {
    /// Opens a Session stream on `client`.
    pub async fn open(client: &mut BenchClient) -> Result<Arc<SessionLink>, String> {
        let (tx, rx) = mpsc::channel(QUEUE);
        let responses = client
            .session(ReceiverStream::new(rx))
            .await
            .map_err(|s| format!("cannot open a Session stream: {}", s.message()))?
            .into_inner();
        Ok(Self::start(tx, responses))
    }

    /// A link over a stream opened by the caller (`tx` feeds it).
    pub fn start(
        tx: mpsc::Sender<SessionRequest>,
        mut responses: Streaming<SessionResponse>,
    ) -> Arc<SessionLink> {
        let waiting: Arc<Waiting> = Arc::default();
        let reader = Arc::clone(&waiting);
        tokio::spawn(async move {
            while let Ok(Some(SessionResponse {
                id,
                response: Some(response),
            })) = responses.message().await
            {
                let waiter = reader
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(&id);
                if let Some(waiter) = waiter {
                    let _ = waiter.send(response);
                }
            }
            // The stream ended: the workers waiting see their answers'
            // senders dropped.
            reader
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clear();
        });
        Arc::new(SessionLink {
            tx,
            next_id: AtomicU64::new(1),
            waiting,
        })
    }

    async fn call(&self, request: Request) -> Result<Response, String> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (waiter, answer) = oneshot::channel();
        self.waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, waiter);
        self.tx
            .send(SessionRequest {
                id,
                timeout_ms: 0,
                request: Some(request),
            })
            .await
            .map_err(|_| "the Session stream is closed".to_owned())?;
        match answer.await {
            Ok(Response::Error(e)) => Err(format!("code {}: {}", e.code, e.message)),
            Ok(response) => Ok(response),
            Err(_) => Err("the Session stream ended".into()),
        }
    }

    /// Takes a lease.
    pub async fn acquire(&self, request: AcquireRequest) -> Result<Lease, String> {
        match self.call(Request::Acquire(request)).await? {
            Response::Acquire(a) => a.lease.ok_or_else(|| "no lease".into()),
            other => Err(format!("not a grant: {other:?}")),
        }
    }

    /// Releases a lease.
    pub async fn release(&self, lease: Lease) -> Result<(), String> {
        match self
            .call(Request::Release(ReleaseRequest {
                name: lease.name,
                owner_token: lease.owner_token,
            }))
            .await?
        {
            Response::Release(_) => Ok(()),
            other => Err(format!("not a release: {other:?}")),
        }
    }

    /// Sends a heartbeat (the KeepAlive message, as a Session request).
    pub async fn heartbeat(&self, request: KeepAliveRequest) -> Result<KeepAliveResponse, String> {
        match self.call(Request::Heartbeat(request)).await? {
            Response::Heartbeat(answer) => Ok(answer),
            other => Err(format!("not a heartbeat's answer: {other:?}")),
        }
    }
}
