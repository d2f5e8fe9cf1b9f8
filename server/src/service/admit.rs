//! Admission: what every call passes before its body is read.
//!
//! Two things an attacker with only network access could otherwise make the
//! broker do are stopped here, in a tower layer in front of every service:
//!
//! - **Buffer for a stranger.** A gRPC handler sees its request only once
//!   the whole message has arrived, so authenticating in the handler means
//!   buffering whatever an unknown caller sends. Calls to the Leasehold API
//!   are authenticated from their headers here ([`Gate::authenticate`]);
//!   a refused call is answered at once and its body is never read.
//! - **Buffer without bound.** tonic reserves a message's announced length
//!   as soon as its 5-byte gRPC prefix arrives, and keeps what arrives until
//!   the message is complete. [`Metered`] reads those prefixes as the data
//!   passes and counts each announced message, from its prefix until its
//!   last byte, against `--conn-max-buffer` (per connection) and
//!   `--max-buffer` (all connections); the message that would go over fails
//!   the call with RESOURCE_EXHAUSTED before anything is reserved for it.
//!
//! HTTP/2 flow control bounds the rest: what a client may send before the
//! broker reads it is the connection's window.

use std::{
    pin::Pin,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    task::{Context, Poll},
};

use futures_util::future::{Either, Ready};
use http_body::{Body as HttpBody, Frame, SizeHint};
use tonic::{
    body::Body,
    codegen::{http, Service},
    Status,
};

use super::{
    conn::ConnInfo,
    gate::{Admitted, Gate},
};
use crate::metrics::{Metrics, Rejection};

/// The path prefix of the calls that need a credential (health checks and
/// reflection stay open, as probes and tools expect).
const API: &str = "/leasehold.v1.LeaseholdService/";

/// Length of the gRPC message prefix: a compression flag and a 4-byte
/// big-endian length.
const PREFIX: usize = 5;

/// The byte budgets: what unfinished requests may hold.
pub struct Budget {
    /// Bytes announced and not yet received, all connections together.
    used: AtomicUsize,
    /// `--max-buffer`.
    limit: usize,
    /// `--conn-max-buffer`.
    conn_limit: usize,
    /// `--max-message-size`: larger messages are tonic's to refuse (with
    /// OUT_OF_RANGE, before it reserves anything), so they are not counted.
    max_message: usize,
    metrics: Metrics,
}

impl Budget {
    /// Budgets of `limit` bytes in all and `conn_limit` per connection.
    pub fn new(limit: usize, conn_limit: usize, max_message: usize, metrics: Metrics) -> Self {
        Budget {
            used: AtomicUsize::new(0),
            limit,
            conn_limit,
            max_message,
            metrics,
        }
    }

    /// Bytes of unfinished requests now held, all connections together.
    #[cfg(test)]
    fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// Takes `n` bytes from the connection's budget and the broker's, or
    /// neither. (The JSON gateway's bodies are held under the same
    /// budgets.)
    pub(super) fn reserve(&self, conn: Option<&AtomicUsize>, n: usize) -> Result<(), Status> {
        if let Some(conn) = conn {
            if !take(conn, n, self.conn_limit) {
                self.metrics.rejected(Rejection::Buffer);
                return Err(crate::Error::exhausted(
                    "conn-max-buffer",
                    format!(
                        "this connection has more unfinished requests buffered than \
                         --conn-max-buffer ({} bytes) allows: send large messages one at a \
                         time, or spread them over connections",
                        self.conn_limit
                    ),
                )
                .into());
            }
        }
        if !take(&self.used, n, self.limit) {
            if let Some(conn) = conn {
                conn.fetch_sub(n, Ordering::Relaxed);
            }
            self.metrics.rejected(Rejection::Buffer);
            return Err(crate::Error::exhausted(
                "max-buffer",
                format!(
                    "the broker has more unfinished requests buffered than --max-buffer ({} \
                     bytes) allows: retry with backoff",
                    self.limit
                ),
            )
            .into());
        }
        Ok(())
    }

    /// Gives back what [`Budget::reserve`] took.
    pub(super) fn release(&self, conn: Option<&AtomicUsize>, n: usize) {
        if let Some(conn) = conn {
            conn.fetch_sub(n, Ordering::Relaxed);
        }
        self.used.fetch_sub(n, Ordering::Relaxed);
    }
}

/// Adds `n` to `counter` if the sum stays within `limit`.
fn take(counter: &AtomicUsize, n: usize, limit: usize) -> bool {
    counter
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
            used.checked_add(n).filter(|sum| *sum <= limit)
        })
        .is_ok()
}

/// The tower layer (see the module docs).
#[derive(Clone)]
pub struct Admission {
    gate: Arc<Gate>,
    budget: Arc<Budget>,
}

impl Admission {
    /// Admits calls through `gate`, buffering under `budget`.
    pub fn new(gate: Arc<Gate>, budget: Arc<Budget>) -> Self {
        Admission { gate, budget }
    }
}

impl<S> tower_layer::Layer<S> for Admission {
    type Service = Admit<S>;

    fn layer(&self, inner: S) -> Admit<S> {
        Admit {
            inner,
            admission: self.clone(),
        }
    }
}

/// The service [`Admission`] puts in front of the routes.
#[derive(Clone)]
pub struct Admit<S> {
    inner: S,
    admission: Admission,
}

impl<S> Service<http::Request<Body>> for Admit<S>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>>,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = Either<Ready<Result<Self::Response, Self::Error>>, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<Body>) -> Self::Future {
        let info = request.extensions().get::<ConnInfo>().cloned();
        if request.uri().path().starts_with(API) {
            let authorization = request
                .headers()
                .get(http::header::AUTHORIZATION)
                .map(http::HeaderValue::as_bytes);
            match self
                .admission
                .gate
                .authenticate(authorization, info.as_ref())
            {
                Ok(Some(grant)) => {
                    request.extensions_mut().insert(Admitted(grant));
                }
                Ok(None) => {}
                // Answered now; the body is dropped unread, which resets the
                // stream and discards what HTTP/2 had buffered of it.
                Err(e) => {
                    return Either::Left(futures_util::future::ok(Status::from(e).into_http()))
                }
            }
        }
        let budget = Arc::clone(&self.admission.budget);
        let request = request.map(|body| {
            Body::new(Metered {
                inner: body,
                budget,
                conn: info.map(|i| i.buffered),
                prefix: [0; PREFIX],
                prefix_len: 0,
                remaining: 0,
                reserved: 0,
            })
        });
        Either::Right(self.inner.call(request))
    }
}

/// A request body that counts the messages it carries against the
/// [`Budget`] from the prefix that announces each until its last byte.
struct Metered {
    inner: Body,
    budget: Arc<Budget>,
    conn: Option<Arc<AtomicUsize>>,
    /// The prefix of the next message, as far as it has arrived.
    prefix: [u8; PREFIX],
    prefix_len: usize,
    /// Bytes of the current message still to come.
    remaining: usize,
    /// What the current message holds of the budgets.
    reserved: usize,
}

impl Metered {
    /// Follows the message framing through one chunk of data.
    fn account(&mut self, mut data: &[u8]) -> Result<(), Status> {
        while !data.is_empty() {
            if self.remaining == 0 {
                let n = (PREFIX - self.prefix_len).min(data.len());
                self.prefix[self.prefix_len..self.prefix_len + n].copy_from_slice(&data[..n]);
                self.prefix_len += n;
                data = &data[n..];
                if self.prefix_len < PREFIX {
                    continue;
                }
                self.prefix_len = 0;
                let [_, a, b, c, d] = self.prefix;
                let len = u32::from_be_bytes([a, b, c, d]) as usize;
                // Over --max-message-size, tonic refuses it from the
                // prefix, reserving nothing: followed, not counted.
                if len <= self.budget.max_message {
                    self.budget.reserve(self.conn.as_deref(), len)?;
                    self.reserved = len;
                }
                self.remaining = len;
            } else {
                let n = self.remaining.min(data.len());
                self.remaining -= n;
                data = &data[n..];
                if self.remaining == 0 {
                    self.settle();
                }
            }
        }
        Ok(())
    }

    /// Gives back what the current message held.
    fn settle(&mut self) {
        if self.reserved > 0 {
            self.budget.release(self.conn.as_deref(), self.reserved);
            self.reserved = 0;
        }
    }
}

impl Drop for Metered {
    fn drop(&mut self) {
        self.settle();
    }
}

impl HttpBody for Metered {
    type Data = tonic::codegen::Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let frame = match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => frame,
            other => return other,
        };
        if let Some(data) = frame.data_ref() {
            if let Err(status) = self.account(data) {
                return Poll::Ready(Some(Err(status)));
            }
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The prefix names the service the generated code serves: a rename in
    /// the proto cannot leave every call unguarded.
    #[test]
    fn api_prefix_is_the_generated_service_path() {
        assert_eq!(
            API,
            format!("/{}/", crate::proto::leasehold_service_server::SERVICE_NAME)
        );
    }

    fn metered(budget: &Arc<Budget>, conn: &Arc<AtomicUsize>) -> Metered {
        Metered {
            inner: Body::empty(),
            budget: Arc::clone(budget),
            conn: Some(Arc::clone(conn)),
            prefix: [0; PREFIX],
            prefix_len: 0,
            remaining: 0,
            reserved: 0,
        }
    }

    fn message(len: usize) -> Vec<u8> {
        let mut m = vec![0];
        m.extend_from_slice(
            &u32::try_from(len)
                .expect("a test message fits a u32 length")
                .to_be_bytes(),
        );
        m.resize(PREFIX + len, 7);
        m
    }

    /// A message holds its announced length from its prefix to its last
    /// byte, however the data is cut; nothing is held between messages.
    #[test]
    fn messages_hold_the_budget_from_prefix_to_last_byte() {
        let budget = Arc::new(Budget::new(1000, 100, 100, Metrics::new()));
        let conn = Arc::new(AtomicUsize::new(0));
        let mut body = metered(&budget, &conn);
        let mut data = message(60);
        data.extend(message(0));
        data.extend(message(40));
        // Cut into 3-byte chunks: prefixes split across chunks.
        let mut held = Vec::new();
        for chunk in data.chunks(3) {
            body.account(chunk).unwrap();
            held.push(conn.load(Ordering::Relaxed));
        }
        assert_eq!(held.iter().max(), Some(&60));
        assert!(held.contains(&40));
        assert_eq!(conn.load(Ordering::Relaxed), 0);
        assert_eq!(budget.used(), 0);
    }

    /// Past the connection's budget the message is refused and nothing is
    /// left held; a dropped body gives back what it held.
    #[test]
    fn the_budgets_refuse_what_would_go_over_and_drop_gives_back() {
        let budget = Arc::new(Budget::new(150, 100, 100, Metrics::new()));
        let conn = Arc::new(AtomicUsize::new(0));
        let mut a = metered(&budget, &conn);
        a.account(&message(80)[..50]).unwrap();
        assert_eq!(conn.load(Ordering::Relaxed), 80);
        let mut b = metered(&budget, &conn);
        let e = b.account(&message(30)[..10]).unwrap_err();
        assert_eq!(e.code(), tonic::Code::ResourceExhausted);
        assert!(e.message().contains("--conn-max-buffer"), "{e:?}");
        assert_eq!(conn.load(Ordering::Relaxed), 80);
        // Another connection fits its own budget but not the broker's.
        let other = Arc::new(AtomicUsize::new(0));
        let mut c = metered(&budget, &other);
        let e = c.account(&message(90)[..5]).unwrap_err();
        assert!(e.message().contains("--max-buffer"), "{e:?}");
        assert_eq!(other.load(Ordering::Relaxed), 0);
        drop(a);
        assert_eq!((conn.load(Ordering::Relaxed), budget.used()), (0, 0));
    }

    /// A message over --max-message-size is left to tonic (OUT_OF_RANGE):
    /// not counted, not refused here.
    #[test]
    fn oversized_messages_are_left_to_the_codec() {
        let budget = Arc::new(Budget::new(150, 100, 100, Metrics::new()));
        let conn = Arc::new(AtomicUsize::new(0));
        let mut body = metered(&budget, &conn);
        body.account(&message(5000)[..5]).unwrap();
        assert_eq!(budget.used(), 0);
    }
}
