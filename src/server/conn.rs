//! Client connections on the gRPC port: accepted under `--max-connections`,
//! given a deadline for their first bytes (plaintext) or their TLS
//! handshake, and labelled with what a request needs to know of its
//! connection ([`ConnInfo`]: an id, the peer, the names of its client
//! certificate, its counters against the per-connection caps).
//!
//! Every connection has its handshake in a task of its own, so a client that
//! connects and says nothing holds its socket and nothing else, and only for
//! the deadline.

use std::{
    io,
    net::SocketAddr,
    pin::Pin,
    sync::{
        atomic::{AtomicU64, AtomicUsize, Ordering},
        Arc,
    },
    task::{Context, Poll},
    time::Duration,
};

use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
    sync::{OwnedSemaphorePermit, Semaphore},
};
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::Connected;

use super::tls::Tls;
use crate::{
    lease::{Caps, Usage},
    metrics::{Metrics, Rejection},
};

/// What a request knows of the connection it came on (a request extension).
#[derive(Clone, Debug)]
pub struct ConnInfo {
    /// Unique among this replica's connections.
    pub id: u64,
    /// The client's address.
    pub peer: SocketAddr,
    /// The subject common name and DNS and URI alternative names of the
    /// client's certificate (mutual TLS); empty without one.
    pub cert_names: Arc<[String]>,
    /// The connection's counters against `--conn-max-*`.
    pub usage: Arc<Usage>,
    /// Bytes of unfinished requests buffered for this connection, against
    /// `--conn-max-buffer` (see `admit::Metered`).
    pub buffered: Arc<AtomicUsize>,
}

/// How connections are accepted.
pub struct Acceptor {
    /// TLS, if the port speaks it.
    pub tls: Option<Arc<Tls>>,
    /// Open connections allowed at once (`--max-connections`).
    pub slots: Arc<Semaphore>,
    /// The deadline for the TLS handshake or the first bytes.
    pub handshake_timeout: Duration,
    /// The caps of each connection.
    pub caps: Caps,
    /// Counts connections and refusals.
    pub metrics: Metrics,
}

/// An accepted connection, plaintext or TLS.
pub struct Conn {
    io: Io,
    info: ConnInfo,
    metrics: Metrics,
    _slot: OwnedSemaphorePermit,
}

enum Io {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.metrics.connections.dec();
    }
}

impl Connected for Conn {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        self.info.clone()
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

impl AsyncRead for Io {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Io {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Io::Plain(s) => s.is_write_vectored(),
            Io::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_flush(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// Accepted connections, ready for HTTP/2 (handshake done, Nagle off: see
/// below). Stops accepting once the server drops the stream.
///
/// Nagle's algorithm is off because answers are small and latency-bound,
/// and Nagle's delay meets the peer's delayed ACK in a 40 ms stall on every
/// message larger than a segment. (Tonic's own `tcp_nodelay` applies only to
/// listeners it binds itself.)
pub fn incoming(listener: TcpListener, acceptor: Acceptor) -> ReceiverStream<io::Result<Conn>> {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    let acceptor = Arc::new(acceptor);
    let refusals = Arc::new(Semaphore::new(MAX_REFUSALS));
    tokio::spawn(async move {
        let ids = AtomicU64::new(1);
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                () = tx.closed() => return,
            };
            let (stream, peer) = match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors, most likely: wait, do not spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            if let Err(e) = stream.set_nodelay(true) {
                tracing::debug!(%peer, error = %e, "cannot set TCP_NODELAY");
            }
            // Over the cap the client learns it now (UNAVAILABLE, go to
            // another replica) instead of waiting in the listen backlog.
            let Ok(slot) = Arc::clone(&acceptor.slots).try_acquire_owned() else {
                acceptor.metrics.rejected(Rejection::Connections);
                tracing::debug!(%peer, "connection refused: --max-connections reached");
                if let Ok(refusal) = Arc::clone(&refusals).try_acquire_owned() {
                    let acceptor = Arc::clone(&acceptor);
                    tokio::spawn(async move {
                        refuse(&acceptor, stream, peer).await;
                        drop(refusal);
                    });
                }
                continue;
            };
            let id = ids.fetch_add(1, Ordering::Relaxed);
            let (acceptor, tx) = (Arc::clone(&acceptor), tx.clone());
            tokio::spawn(async move {
                let Some((io, cert_names)) = handshake(&acceptor, stream, peer).await else {
                    return;
                };
                acceptor.metrics.connections.inc();
                let conn = Conn {
                    io,
                    info: ConnInfo {
                        id,
                        peer,
                        cert_names: cert_names.into(),
                        usage: Usage::connection(acceptor.caps),
                        buffered: Arc::default(),
                    },
                    metrics: acceptor.metrics.clone(),
                    _slot: slot,
                };
                let _ = tx.send(Ok(conn)).await;
            });
        }
    });
    ReceiverStream::new(rx)
}

/// Refusals of connections past `--max-connections` being answered at once;
/// past it, such connections are closed without a word.
const MAX_REFUSALS: usize = 32;

/// How long a refused connection is kept to tell the client why.
const REFUSAL_TIME: Duration = Duration::from_secs(2);

/// Answers every call on a connection past `--max-connections` with
/// UNAVAILABLE and a reason, then closes it: a client told nothing but a
/// closed connection sees CANCELLED, which it would not retry elsewhere.
async fn refuse(acceptor: &Acceptor, stream: TcpStream, peer: SocketAddr) {
    use http_body_util::Empty;
    use hyper::{body::Bytes, service::service_fn, Response};
    use hyper_util::rt::{TokioExecutor, TokioIo};

    let refusal = async {
        let (io, _) = handshake(acceptor, stream, peer).await?;
        let service = service_fn(|_request| async {
            Response::builder()
                .header("content-type", "application/grpc")
                .header("grpc-status", "14")
                .header(
                    "grpc-message",
                    "this broker replica is at its connection limit (--max-connections); \
                     retry, or use another replica",
                )
                .body(Empty::<Bytes>::new())
        });
        hyper::server::conn::http2::Builder::new(TokioExecutor::new())
            .max_concurrent_streams(1)
            .serve_connection(TokioIo::new(io), service)
            .await
            .ok()
    };
    let _ = tokio::time::timeout(REFUSAL_TIME, refusal).await;
}

/// The TLS handshake, or (plaintext) the first bytes, within the deadline:
/// the connection ready for HTTP/2, and the names of its client certificate.
async fn handshake(
    acceptor: &Acceptor,
    stream: TcpStream,
    peer: SocketAddr,
) -> Option<(Io, Vec<String>)> {
    let deadline = acceptor.handshake_timeout;
    let (io, cert_names) = match &acceptor.tls {
        None => {
            // The HTTP/2 preface must start within the deadline; a client
            // that connects and stays silent is dropped.
            let mut first = [0u8; 1];
            match tokio::time::timeout(deadline, stream.peek(&mut first)).await {
                Ok(Ok(n)) if n > 0 => {}
                Ok(_) => return None,
                Err(_) => {
                    tracing::debug!(%peer, "connection closed: nothing sent within the handshake deadline");
                    return None;
                }
            }
            (Io::Plain(stream), Vec::new())
        }
        Some(tls) => match tokio::time::timeout(deadline, tls.acceptor().accept(stream)).await {
            Ok(Ok(stream)) => {
                let names = stream
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|chain| chain.first())
                    .map(|leaf| certificate_names(leaf))
                    .unwrap_or_default();
                (Io::Tls(Box::new(stream)), names)
            }
            Ok(Err(e)) => {
                tracing::debug!(%peer, error = %e, "TLS handshake failed");
                return None;
            }
            Err(_) => {
                tracing::debug!(%peer, "TLS handshake timed out");
                return None;
            }
        },
    };
    Some((io, cert_names))
}

/// The names a client certificate answers to: its subject common names, and
/// the DNS names and URIs (SPIFFE IDs...) of its subject alternative names.
/// TLS has verified the chain already; this only reads the leaf.
fn certificate_names(der: &[u8]) -> Vec<String> {
    use x509_parser::{certificate::X509Certificate, extensions::GeneralName, prelude::FromDer};
    let Ok((_, cert)) = X509Certificate::from_der(der) else {
        return Vec::new();
    };
    let mut names: Vec<String> = cert
        .subject()
        .iter_common_name()
        .filter_map(|cn| cn.as_str().ok())
        .map(str::to_owned)
        .collect();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                GeneralName::DNSName(n) | GeneralName::URI(n) => names.push((*n).to_owned()),
                _ => {}
            }
        }
    }
    names
}
