//! The HTTP endpoint for Prometheus: `GET /metrics`. Plain HTTP/1.1 on its
//! own port, so scraping needs no gRPC and can stay open when the API is
//! locked down.
//!
//! Anyone who reaches the port can open connections to it, so each is
//! bounded: at most `--metrics-max-connections` open at once, and
//! `--metrics-timeout` to send a request's headers or to take more of an
//! answer. A client that trickles a request line, or asks and never reads,
//! holds its socket for that long and no more.

use std::{convert::Infallible, sync::Arc, time::Duration};

use http_body_util::Full;
use hyper::{
    body::Bytes, header, server::conn::http1, service::service_fn, Method, Request, Response,
    StatusCode,
};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::{
    net::TcpListener,
    sync::{watch, Semaphore},
};

use super::deadlines::Deadlines;
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
                    TokioIo::new(Deadlines::new(stream, bounds.timeout, "--metrics-timeout")),
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
