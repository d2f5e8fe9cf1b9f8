//! The HTTP endpoint for Prometheus: `GET /metrics`. Plain HTTP/1.1 on its
//! own port, so scraping needs no gRPC and can stay open when the API is
//! locked down.
//!
//! Anyone who reaches the port can open connections to it, so each is
//! bounded: at most `--metrics-max-connections` open at once, and
//! `--metrics-timeout` to send a request's headers or to take more of an
//! answer. A client that trickles a request line, or asks and never reads,
//! holds its socket for that long and no more.

use std::{
    convert::Infallible,
    future::Future,
    io,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use http_body_util::Full;
use hyper::{
    body::Bytes, header, server::conn::http1, service::service_fn, Method, Request, Response,
    StatusCode,
};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
    sync::{watch, Semaphore},
    time::Sleep,
};

use crate::metrics::Metrics;

/// What one connection to the metrics port may hold.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    /// Connections open at once (`--metrics-max-connections`); past it a
    /// new one is closed at once.
    pub max_connections: usize,
    /// Longest wait for a request's headers, and longest stall of an answer
    /// the client does not read (`--metrics-timeout`).
    pub timeout: Duration,
}

/// Serves `/metrics` until `shutdown` turns true.
pub async fn serve(
    listener: TcpListener,
    bounds: Bounds,
    metrics: Metrics,
    mut shutdown: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(bounds.max_connections));
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.wait_for(|down| *down) => return,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors, most likely: wait, do not spin.
                tracing::warn!(error = %e, "metrics listener accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // Closed without a word: an answer would be one more write to a
        // client that may not read it, and Prometheus reports the failed
        // scrape all the same.
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            tracing::debug!(%peer, "metrics connection closed: --metrics-max-connections reached");
            continue;
        };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let metrics = metrics.clone();
                async move { Ok::<_, Infallible>(respond(&req, &metrics)) }
            });
            // hyper's header timeout also runs between requests on a kept-
            // alive connection: an idle one is closed after it too.
            if let Err(e) = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(bounds.timeout)
                .serve_connection(
                    TokioIo::new(WriteDeadline::new(stream, bounds.timeout)),
                    service,
                )
                .await
            {
                tracing::debug!(%peer, error = %e, "metrics connection ended with an error");
            }
            drop(slot);
        });
    }
}

/// A socket whose writes fail once they have been stuck for `limit`: the
/// header timeout bounds how long a client may take to ask, this how long it
/// may leave the answer unread (a full socket buffer) once asked.
struct WriteDeadline {
    io: TcpStream,
    limit: Duration,
    /// Armed while a write waits for room; reset by any progress.
    stuck: Option<Pin<Box<Sleep>>>,
}

impl WriteDeadline {
    fn new(io: TcpStream, limit: Duration) -> Self {
        WriteDeadline {
            io,
            limit,
            stuck: None,
        }
    }

    /// `poll` as it is, but an error if it has been pending for `limit`.
    fn bound<T>(&mut self, cx: &mut Context<'_>, poll: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if poll.is_ready() {
            self.stuck = None;
            return poll;
        }
        let limit = self.limit;
        let stuck = self
            .stuck
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match stuck.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client left the answer unread past --metrics-timeout",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncRead for WriteDeadline {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for WriteDeadline {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = &mut *self;
        let poll = Pin::new(&mut me.io).poll_write(cx, buf);
        me.bound(cx, poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let me = &mut *self;
        let poll = Pin::new(&mut me.io).poll_write_vectored(cx, bufs);
        me.bound(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = &mut *self;
        let poll = Pin::new(&mut me.io).poll_flush(cx);
        me.bound(cx, poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = &mut *self;
        let poll = Pin::new(&mut me.io).poll_shutdown(cx);
        me.bound(cx, poll)
    }
}

fn respond(req: &Request<hyper::body::Incoming>, metrics: &Metrics) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match (req.method(), req.uri().path()) {
        (&Method::GET, "/metrics") => (
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            metrics.render(),
        ),
        (_, "/metrics") => (
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain; charset=utf-8",
            "use GET\n".to_owned(),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "not found: metrics are at /metrics\n".to_owned(),
        ),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    response
}
