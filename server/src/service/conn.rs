//! Client connections on the gRPC port: accepted under `--max-connections`,
//! given one deadline for their TLS handshake (if any), their HTTP/2 client
//! preface and their first SETTINGS frame, and labelled with what a request
//! needs to know of its connection ([`ConnInfo`]: an id, the peer, the names
//! of its client certificate, its counters against the per-connection caps).
//!
//! Every connection has its handshake in a task of its own, so a client that
//! connects and says nothing, or only part of its preface, holds its socket
//! and a slot under `--max-connections`, and only for the deadline. Past the
//! handshake, HTTP/2 pings (`--ping-interval`, `--ping-timeout`) close a
//! connection whose peer stops answering. hyper waits for the preface
//! without any deadline, which is why it is read here first and replayed.

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
    /// The deadline for the TLS handshake, the HTTP/2 preface and the
    /// client's first SETTINGS frame, all together.
    pub handshake_timeout: Duration,
    /// The caps of each connection.
    pub caps: Caps,
    /// Counts connections and refusals.
    pub metrics: Metrics,
    /// Whether the port speaks HTTP/2 only (the gRPC port: the preface and
    /// first SETTINGS frame are read within the deadline), or HTTP/1.1 too
    /// (the JSON gateway: the TLS handshake alone is within the deadline,
    /// and the server's header read timeout bounds the rest).
    pub http2_only: bool,
}

/// An accepted connection, plaintext or TLS.
pub struct Conn {
    io: Stream,
    info: ConnInfo,
    metrics: Metrics,
    _slot: OwnedSemaphorePermit,
}

enum Io {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// A connection whose first bytes (the preface, the first SETTINGS frame,
/// whatever came with them) were read to check them: reads return those
/// bytes first, then the socket's, so hyper sees the connection whole.
struct Stream {
    io: Io,
    replay: Vec<u8>,
    replayed: usize,
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

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if me.replayed < me.replay.len() {
            let rest = &me.replay[me.replayed..];
            let n = rest.len().min(buf.remaining());
            buf.put_slice(&rest[..n]);
            me.replayed += n;
            if me.replayed == me.replay.len() {
                me.replay = Vec::new();
                me.replayed = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut me.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Stream {
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
                let (io, cert_names) = match handshake(&acceptor, stream, peer).await {
                    Ok(opened) => opened,
                    Err(Refused::Counted) => {
                        acceptor.metrics.rejected(Rejection::Handshake);
                        return;
                    }
                    Err(Refused::Quiet) => return,
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
        let (io, _) = handshake(acceptor, stream, peer).await.ok()?;
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

/// Why a connection was closed before hyper saw it.
enum Refused {
    /// The handshake failed or ran out of time, or the client spoke
    /// something else than HTTP/2: counted in `leasehold_rejected_total`
    /// (`handshake`).
    Counted,
    /// The client closed (or reset) the connection itself: not a refusal,
    /// and what a TCP health probe does.
    Quiet,
}

/// The TLS handshake (if any), the HTTP/2 client preface and the client's
/// first SETTINGS frame, all within one deadline: the connection ready for
/// hyper (those bytes to be replayed), and the names of its client
/// certificate.
async fn handshake(
    acceptor: &Acceptor,
    stream: TcpStream,
    peer: SocketAddr,
) -> Result<(Stream, Vec<String>), Refused> {
    match tokio::time::timeout(acceptor.handshake_timeout, open(acceptor, stream, peer)).await {
        Ok(opened) => opened,
        Err(_) => {
            tracing::debug!(
                %peer,
                "connection closed: no TLS handshake, HTTP/2 preface and SETTINGS within --handshake-timeout"
            );
            Err(Refused::Counted)
        }
    }
}

/// [`handshake`] without its deadline.
async fn open(
    acceptor: &Acceptor,
    stream: TcpStream,
    peer: SocketAddr,
) -> Result<(Stream, Vec<String>), Refused> {
    let (mut io, cert_names) = match &acceptor.tls {
        None => (Io::Plain(stream), Vec::new()),
        Some(tls) => match tls.acceptor(acceptor.http2_only).accept(stream).await {
            Ok(stream) => {
                let names = stream
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|chain| chain.first())
                    .map(|leaf| certificate_names(leaf))
                    .unwrap_or_default();
                (Io::Tls(Box::new(stream)), names)
            }
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                tracing::debug!(%peer, "connection closed by the client during the TLS handshake");
                return Err(Refused::Quiet);
            }
            Err(e) => {
                tracing::debug!(%peer, error = %e, "TLS handshake failed");
                return Err(Refused::Counted);
            }
        },
    };
    let replay = if acceptor.http2_only {
        read_preface(&mut io, peer).await?
    } else {
        Vec::new()
    };
    Ok((
        Stream {
            io,
            replay,
            replayed: 0,
        },
        cert_names,
    ))
}

/// What every HTTP/2 client sends first (RFC 9113, section 3.4), followed by
/// a SETTINGS frame.
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Length of an HTTP/2 frame header.
const FRAME_HEADER: usize = 9;

/// Largest first SETTINGS frame accepted, in bytes of payload: 32 settings
/// of 6 bytes. HTTP/2 defines 9 settings and clients send 2 to 6 of them; a
/// bound keeps a client from holding the handshake with a long trickle.
const MAX_FIRST_SETTINGS: usize = 32 * 6;

/// Reads from `io` until the client preface and a whole first SETTINGS
/// frame are in: every byte read, to be replayed to hyper. Wrong bytes end
/// it at once, without waiting for the rest.
async fn read_preface(io: &mut Io, peer: SocketAddr) -> Result<Vec<u8>, Refused> {
    use tokio::io::AsyncReadExt;
    // Read straight into the buffer (it grows as needed): at most a few
    // hundred bytes, since reading stops once the frame is complete.
    let mut read = Vec::with_capacity(PREFACE.len() + FRAME_HEADER + 64);
    loop {
        match check_preface(&read) {
            Ok(true) => return Ok(read),
            Ok(false) => {}
            Err(why) => {
                tracing::debug!(%peer, why, "connection closed: not an HTTP/2 client");
                return Err(Refused::Counted);
            }
        }
        match io.read_buf(&mut read).await {
            Ok(0) => {
                tracing::debug!(%peer, bytes = read.len(), "connection closed by the client before its HTTP/2 preface");
                return Err(Refused::Quiet);
            }
            Ok(_) => {}
            Err(e) => {
                tracing::debug!(%peer, error = %e, "connection lost before its HTTP/2 preface");
                return Err(Refused::Quiet);
            }
        }
    }
}

/// Whether `read` (a connection's first bytes) holds the whole client
/// preface and first SETTINGS frame (`Ok(true)`), a beginning of them
/// (`Ok(false)`), or something else (`Err`, saying what).
fn check_preface(read: &[u8]) -> Result<bool, &'static str> {
    let magic = read.len().min(PREFACE.len());
    if read[..magic] != PREFACE[..magic] {
        return Err("not the HTTP/2 client preface");
    }
    let Some(header) = read.get(PREFACE.len()..PREFACE.len() + FRAME_HEADER) else {
        return Ok(false);
    };
    let length =
        usize::from(header[0]) << 16 | usize::from(header[1]) << 8 | usize::from(header[2]);
    let (kind, flags) = (header[3], header[4]);
    let stream = u32::from_be_bytes([header[5], header[6], header[7], header[8]]) & 0x7fff_ffff;
    if kind != 0x4 {
        return Err("the first frame is not SETTINGS");
    }
    if flags & 0x1 != 0 {
        return Err("the first SETTINGS frame is an acknowledgement");
    }
    if stream != 0 {
        return Err("the first SETTINGS frame names a stream");
    }
    if length % 6 != 0 {
        return Err("the first SETTINGS frame's length is not a multiple of 6");
    }
    if length > MAX_FIRST_SETTINGS {
        return Err("the first SETTINGS frame is too long");
    }
    Ok(read.len() >= PREFACE.len() + FRAME_HEADER + length)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The client preface and a SETTINGS frame header of `length` bytes
    /// with `kind`, `flags` and `stream`.
    fn preface(length: usize, kind: u8, flags: u8, stream: u32) -> Vec<u8> {
        let mut bytes = PREFACE.to_vec();
        bytes.extend_from_slice(&u32::try_from(length).unwrap().to_be_bytes()[1..]);
        bytes.extend_from_slice(&[kind, flags]);
        bytes.extend_from_slice(&stream.to_be_bytes());
        bytes
    }

    #[test]
    fn a_preface_is_complete_with_its_whole_settings_frame() {
        let mut bytes = preface(12, 0x4, 0, 0);
        for end in 0..bytes.len() + 12 {
            bytes.resize(bytes.len().max(end), 0);
            assert_eq!(check_preface(&bytes[..end]), Ok(false), "at {end} bytes");
        }
        bytes.resize(PREFACE.len() + FRAME_HEADER + 12, 0);
        assert_eq!(check_preface(&bytes), Ok(true));
        // What follows the frame (more frames, a request) is for hyper.
        bytes.extend_from_slice(b"more");
        assert_eq!(check_preface(&bytes), Ok(true));
        assert_eq!(check_preface(&preface(0, 0x4, 0, 0)), Ok(true));
    }

    #[test]
    fn anything_else_is_refused_at_the_first_wrong_byte() {
        assert!(check_preface(b"G").is_err());
        assert!(check_preface(b"GET / HTTP/1.1\r\n").is_err());
        assert!(check_preface(b"PRI * HTTP/1.1").is_err());
        assert!(
            check_preface(&preface(8, 0x6, 0, 0)).is_err(),
            "a PING first"
        );
        assert!(
            check_preface(&preface(0, 0x4, 0x1, 0)).is_err(),
            "an ACK first"
        );
        assert!(
            check_preface(&preface(6, 0x4, 0, 1)).is_err(),
            "on a stream"
        );
        assert!(
            check_preface(&preface(7, 0x4, 0, 0)).is_err(),
            "not 6-byte settings"
        );
        assert!(check_preface(&preface(MAX_FIRST_SETTINGS + 6, 0x4, 0, 0)).is_err());
        assert_eq!(
            check_preface(&preface(MAX_FIRST_SETTINGS, 0x4, 0, 0)),
            Ok(false)
        );
    }
}
