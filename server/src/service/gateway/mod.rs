//! The HTTP/JSON API beside gRPC (`--http-listen`), as etcd's grpc-gateway
//! serves its API: `POST /v1/acquire` with an AcquireRequest in the proto3
//! JSON mapping answers an AcquireResponse the same way. For what cannot
//! speak gRPC: curl, shell scripts, serverless functions, a browser (the
//! status page at `/`).
//!
//! Thin on purpose: a route parses its body, calls the same
//! `LeaseholdService` method the gRPC port calls (with a `tonic::Request`
//! carrying the `authorization` header and the connection's [`ConnInfo`]),
//! and encodes the answer. Authentication, tenants, caps and limits are the
//! gRPC call's own; a refusal is the same `Status`, its code mapped to an
//! HTTP status as grpc-gateway maps it and its ErrorInfo and RetryInfo
//! read into the JSON body ([`answer`]). Connections come through the same
//! acceptor as the gRPC port's (`conn.rs`: its cap, TLS and handshake
//! deadline), with HTTP/1.1 allowed.
//!
//! Bounds of its own, since anyone who reaches the port can open
//! connections: a body larger than `--max-message-size` is refused (413)
//! before more of it is read; `--http-timeout` to send the headers and then
//! the body; only `application/json` bodies (415 otherwise), so that a page
//! of another origin cannot send a "simple" cross-site request without a
//! CORS preflight, which this port never answers (no CORS headers at all).

mod answer;
pub mod openapi;
mod status;

use std::{convert::Infallible, sync::Arc, time::Duration};

use http_body_util::{BodyExt, Full, Limited};
use hyper::{
    body::{Bytes, Incoming},
    header, Method, Request, Response, StatusCode,
};
use hyper_util::{
    rt::{TokioExecutor, TokioIo, TokioTimer},
    server::conn::auto,
};
use tokio::{net::TcpListener, sync::watch};
use tokio_stream::StreamExt as _;
use tonic::{metadata::MetadataValue, transport::server::Connected};

use self::answer::{json, refusal, Problem};
use super::{
    conn::{self, Acceptor, ConnInfo},
    deadlines::Deadlines,
    gate::{Admitted, Gate},
    grpc::LeaseholdApi,
    health::Refusal,
};
use crate::{
    lease::Leases,
    proto::{leasehold_service_server::LeaseholdService, *},
};

/// The status page (owned by the page's authors: served as it is).
const STATUS_PAGE: &str = include_str!("status.html");

/// What the gateway serves with.
pub struct Gateway {
    /// The gRPC service whose methods the routes call.
    pub api: Arc<LeaseholdApi>,
    /// The gate, to refuse an unknown caller before its body is read.
    pub gate: Arc<Gate>,
    /// The lease rules (recent losses, for `/v1/status`).
    pub leases: Leases,
    /// The store's health as the gRPC health service reports it.
    pub health: tonic_health::server::HealthService,
    /// Whether the store is refused as unsafe, and why.
    pub refusal: Refusal,
    /// Largest request body (`--max-message-size`).
    pub max_body: usize,
    /// What bodies being received may hold, shared with the gRPC port
    /// (`--max-buffer`, `--conn-max-buffer`).
    pub budget: Arc<super::admit::Budget>,
    /// `--http-timeout`.
    pub timeout: Duration,
    /// HTTP/2 streams one connection may have open at once
    /// (`--max-concurrent-streams`).
    pub max_streams: u32,
    /// HTTP/2 pings (`--ping-interval`, `--ping-timeout`).
    pub ping: (Duration, Duration),
}

/// A route of the JSON API: its path, and the RPC it calls (named as in
/// the proto's service), or what else it serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    /// The path.
    pub path: &'static str,
    /// The method.
    pub method: &'static str,
    /// The RPC of `LeaseholdService` it calls, if any.
    pub rpc: Option<&'static str>,
}

/// Every route, in the order the 404 answer and the OpenAPI document list
/// them.
pub const ROUTES: &[Route] = &[
    unary("/v1/acquire", "Acquire"),
    unary("/v1/renew", "Renew"),
    unary("/v1/release", "Release"),
    unary("/v1/describe", "Describe"),
    unary("/v1/list", "List"),
    unary("/v1/check-fence", "CheckFence"),
    unary("/v1/revoke", "Revoke"),
    unary("/v1/leader", "Leader"),
    get("/v1/status"),
    get("/v1/openapi.json"),
    get("/"),
    get("/status"),
];

const fn unary(path: &'static str, rpc: &'static str) -> Route {
    Route {
        path,
        method: "POST",
        rpc: Some(rpc),
    }
}

const fn get(path: &'static str) -> Route {
    Route {
        path,
        method: "GET",
        rpc: None,
    }
}

/// Serves the JSON API on `listener` until `stop` turns true; then stops
/// accepting and lets each connection finish the requests in flight (a
/// waiting Acquire ends at once: the lease rules end every wait on
/// shutdown).
pub async fn serve(
    listener: TcpListener,
    acceptor: Acceptor,
    gateway: Gateway,
    mut stop: watch::Receiver<bool>,
) {
    let gateway = Arc::new(gateway);
    let mut incoming = conn::incoming(listener, acceptor);
    loop {
        let conn = tokio::select! {
            conn = incoming.next() => conn,
            _ = stop.wait_for(|stopped| *stopped) => return,
        };
        let conn = match conn {
            Some(Ok(conn)) => conn,
            // One connection's failure is its own: the port goes on.
            Some(Err(e)) => {
                tracing::debug!(error = %e, "HTTP API connection failed before its first request");
                continue;
            }
            None => return,
        };
        let gateway = Arc::clone(&gateway);
        let stop = stop.clone();
        tokio::spawn(async move { gateway.connection(conn, stop).await });
    }
}

impl Gateway {
    /// Serves one connection, HTTP/1.1 or HTTP/2.
    async fn connection(self: Arc<Self>, conn: conn::Conn, mut stop: watch::Receiver<bool>) {
        let info = conn.connect_info();
        let peer = info.peer;
        let service = {
            let gateway = Arc::clone(&self);
            hyper::service::service_fn(move |request| {
                let (gateway, info) = (Arc::clone(&gateway), info.clone());
                async move { Ok::<_, Infallible>(gateway.respond(request, info).await) }
            })
        };
        let mut builder = auto::Builder::new(TokioExecutor::new());
        // hyper's header timeout also runs between requests on a kept-alive
        // connection: an idle one is closed after it too.
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(self.timeout)
            // What one connection may make hyper buffer of a request's
            // head (its default is about 400 KiB; a token and a few short
            // headers need a few hundred bytes): larger heads get 431.
            .max_buf_size(H1_BUFFER);
        builder
            .http2()
            .timer(TokioTimer::new())
            .max_concurrent_streams(self.max_streams)
            .max_header_list_size(super::MAX_HEADER_LIST_SIZE)
            .keep_alive_interval(self.ping.0)
            .keep_alive_timeout(self.ping.1);
        let io = TokioIo::new(
            Deadlines::new(conn, self.timeout, "--http-timeout").first_bytes(FIRST_BYTES),
        );
        let connection = builder.serve_connection(io, service);
        tokio::pin!(connection);
        let served = tokio::select! {
            served = connection.as_mut() => served,
            () = stopping(&mut stop) => {
                connection.as_mut().graceful_shutdown();
                connection.await
            }
        };
        if let Err(e) = served {
            tracing::debug!(%peer, error = %e, "HTTP API connection ended with an error");
        }
    }

    /// The answer to one request.
    async fn respond(&self, request: Request<Incoming>, info: ConnInfo) -> Response<Full<Bytes>> {
        let path = request.uri().path().to_owned();
        let Some(route) = ROUTES.iter().find(|r| r.path == path) else {
            return Problem::unknown_route(&path).into();
        };
        if request.method().as_str() != route.method
            && !(route.method == "GET" && request.method() == Method::HEAD)
        {
            return Problem::method(route).into();
        }
        match (route.rpc, route.path) {
            (Some(rpc), _) => self
                .call(rpc, request, info)
                .await
                .unwrap_or_else(Into::into),
            (None, "/v1/status") => match self.authenticated(&request, info) {
                Ok(call) => status::answer(self, &call).await,
                Err(problem) => problem.into(),
            },
            (None, "/v1/openapi.json") => json(StatusCode::OK, openapi::document().as_bytes()),
            (None, _) => page(),
        }
    }

    /// Calls `rpc` with the request's JSON body.
    async fn call(
        &self,
        rpc: &str,
        request: Request<Incoming>,
        info: ConnInfo,
    ) -> Result<Response<Full<Bytes>>, Problem> {
        if !is_json(request.headers()) {
            return Err(Problem::media_type());
        }
        // Credentials first: what an unknown caller sends is never read.
        let call = self.authenticated(&request, info)?;
        let body = self.body(request.into_body(), &call.info).await?;
        let api = &*self.api;
        // One arm per route: parse, call the trait method, encode.
        macro_rules! unary {
            ($method:ident, $message:ty) => {{
                let message: $message = parse(&body, stringify!($message))?;
                answer::encode(api.$method(call.request(message)).await)
            }};
        }
        Ok(match rpc {
            "Acquire" => unary!(acquire, AcquireRequest),
            "Renew" => unary!(renew, RenewRequest),
            "Release" => unary!(release, ReleaseRequest),
            "Describe" => unary!(describe, DescribeRequest),
            "List" => unary!(list, ListRequest),
            "CheckFence" => unary!(check_fence, CheckFenceRequest),
            "Revoke" => unary!(revoke, RevokeRequest),
            "Leader" => unary!(leader, LeaderRequest),
            other => {
                return Err(Problem::internal(format!(
                    "the route of {other} has no method"
                )))
            }
        })
    }

    /// The caller of `request` as the gate admits its headers (the
    /// `authorization` header, the connection's certificate names), as
    /// the gRPC port's admission layer does: an unknown caller is refused
    /// before anything of its body is read.
    fn authenticated<B>(&self, request: &Request<B>, info: ConnInfo) -> Result<Call, Problem> {
        let authorization = request.headers().get(header::AUTHORIZATION);
        let grant = self
            .gate
            .authenticate(
                authorization.map(header::HeaderValue::as_bytes),
                Some(&info),
            )
            .map_err(|e| refusal(&tonic::Status::from(e)))?;
        Ok(Call {
            // A value that is no valid metadata (not visible ASCII) was
            // refused by the gate already, unless authentication is off.
            authorization: authorization.and_then(|v| MetadataValue::try_from(v.as_bytes()).ok()),
            info,
            grant,
        })
    }

    /// The request's body: at most `--max-message-size` bytes (refused
    /// before more is read), within `--http-timeout`, held under the byte
    /// budgets of unfinished requests as a gRPC message is (its announced
    /// length, or `--max-message-size` when it announces none).
    async fn body(&self, body: Incoming, info: &ConnInfo) -> Result<Bytes, Problem> {
        use http_body::Body as _;
        let announced = body.size_hint().exact();
        let held = match announced {
            Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
            None => self.max_body,
        };
        if held > self.max_body {
            return Err(Problem::too_large(self.max_body));
        }
        self.budget
            .reserve(Some(&info.buffered), held)
            .map_err(|status| refusal(&status))?;
        let _held = Held {
            budget: &self.budget,
            conn: &info.buffered,
            bytes: held,
        };
        match tokio::time::timeout(self.timeout, Limited::new(body, self.max_body).collect()).await
        {
            Err(_) => Err(Problem::slow_body(self.timeout)),
            Ok(Ok(collected)) => Ok(collected.to_bytes()),
            Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
                Err(Problem::too_large(self.max_body))
            }
            Ok(Err(e)) => Err(Problem::bad_body(&e.to_string())),
        }
    }
}

/// Bytes of the budgets held while a body is received, given back when
/// it is in (or abandoned).
struct Held<'a> {
    budget: &'a super::admit::Budget,
    conn: &'a std::sync::atomic::AtomicUsize,
    bytes: usize,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.budget.release(Some(self.conn), self.bytes);
    }
}

/// Resolves when the broker stops (the watch's guard dropped at once).
async fn stopping(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stopped| *stopped).await;
}

/// What the gRPC port would know of a call made by this HTTP request.
struct Call {
    authorization: Option<MetadataValue<tonic::metadata::Ascii>>,
    info: ConnInfo,
    grant: Option<crate::auth::Grant>,
}

impl Call {
    /// A `tonic::Request` of `message` as the gRPC port would make it:
    /// the `authorization` header in its metadata, the connection's
    /// [`ConnInfo`] and the credential the gate found in its extensions.
    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        if let Some(value) = &self.authorization {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        request.extensions_mut().insert(self.info.clone());
        if let Some(grant) = &self.grant {
            request.extensions_mut().insert(Admitted(grant.clone()));
        }
        request
    }
}

/// `body` as a `T` in the proto3 JSON mapping; an empty body is the empty
/// message (`{}`).
fn parse<T: serde::de::DeserializeOwned>(body: &[u8], name: &str) -> Result<T, Problem> {
    let body = if body.iter().all(u8::is_ascii_whitespace) {
        &b"{}"[..]
    } else {
        body
    };
    serde_json::from_slice(body).map_err(|e| {
        refusal(&tonic::Status::from(crate::error::Error::InvalidArgument(
            format!("the request body is not a {name} in JSON: {e}"),
        )))
    })
}

/// Whether the request says its body is JSON (`application/json`, with
/// parameters such as `charset=utf-8` or not).
fn is_json(headers: &hyper::HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
}

/// The status page: no data in it (it asks the /v1 routes, with the
/// user's token), so served without credentials; never framed, and
/// running only its own scripts.
fn page() -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(STATUS_PAGE.as_bytes())));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/html; charset=utf-8"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        header::HeaderValue::from_static(
            "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'",
        ),
    );
    headers.insert(
        header::X_FRAME_OPTIONS,
        header::HeaderValue::from_static("DENY"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        header::HeaderValue::from_static("nosniff"),
    );
    response
}

/// The read buffer of an HTTP/1.1 connection, the bound on a request's
/// head (hyper's least is 8 KiB).
const H1_BUFFER: usize = 64 * 1024;

/// Bytes every client sends first within `--http-timeout`: the HTTP/2
/// client preface is 24 bytes, and a request line with its first header
/// longer. Past them, HTTP/1.1's header read timeout (and HTTP/2's pings)
/// bound the connection; before them nothing would, since hyper waits for
/// the bytes that tell HTTP/1.1 from HTTP/2 without a deadline.
const FIRST_BYTES: usize = 24;
