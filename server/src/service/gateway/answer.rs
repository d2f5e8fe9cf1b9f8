//! The gateway's answers: a response message in JSON, or a refusal read
//! from the same `tonic::Status` the gRPC port sends (`service::status`
//! makes it): its code as grpc-gateway maps it to an HTTP status, and a
//! JSON body with the code's name, the message, and the ErrorInfo's
//! reason and metadata and the RetryInfo's delay, so that a program reads
//! the same reasons over HTTP as over gRPC.

use std::time::Duration;

use http_body_util::Full;
use hyper::{body::Bytes, header, Response, StatusCode};
use serde_json::{json, Map, Value};
use tonic::{Code, Status};
use tonic_types::StatusExt as _;

use super::{Route, ROUTES};
use crate::service::status::PLACE_METADATA;

/// An answer of `status` with a JSON body.
pub fn json(status: StatusCode, body: &[u8]) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::copy_from_slice(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    response
}

/// The answer to a call: its response message in the proto3 JSON mapping,
/// or its refusal.
pub fn encode<T: serde::Serialize>(
    answer: Result<tonic::Response<T>, Status>,
) -> Response<Full<Bytes>> {
    match answer {
        Ok(response) => match serde_json::to_vec(response.get_ref()) {
            Ok(body) => json(StatusCode::OK, &body),
            Err(e) => Problem::internal(format!("cannot encode the answer in JSON: {e}")).into(),
        },
        Err(status) => refusal(&status).into(),
    }
}

/// A refusal, as an HTTP status, headers and a JSON body.
#[derive(Debug)]
pub struct Problem {
    status: StatusCode,
    body: Value,
    retry_after: Option<Duration>,
    allow: Option<&'static str>,
}

/// The HTTP status of a gRPC code, as grpc-gateway maps it
/// (`runtime.HTTPStatusFromCode`), which follows google.rpc.Code's own
/// comments. FAILED_PRECONDITION is 400, not 412: 412 answers a failed
/// conditional header (If-Match), which no request here has; the broker's
/// FAILED_PRECONDITION is NOT_OWNER (a wrong owner token), told apart from
/// a bad argument by `code` and `reason` in the body.
pub fn http_status(code: Code) -> StatusCode {
    match code {
        Code::Ok => StatusCode::OK,
        Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => {
            StatusCode::BAD_REQUEST
        }
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::Aborted | Code::AlreadyExists => StatusCode::CONFLICT,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        // 499 Client Closed Request (nginx's), as grpc-gateway answers.
        Code::Cancelled => StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        Code::Unknown | Code::Internal | Code::DataLoss => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// The canonical name of a gRPC code (`google.rpc.Code`), as the body's
/// `code` says it.
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

/// The refusal a gRPC caller would get as `status`, over HTTP.
pub fn refusal(status: &Status) -> Problem {
    let details = status.get_error_details();
    let (reason, metadata) = details.error_info().map_or_else(
        || (String::new(), Map::new()),
        |info| {
            let mut metadata: Vec<_> = info.metadata.iter().collect();
            metadata.sort();
            (
                info.reason.clone(),
                metadata
                    .into_iter()
                    .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                    .collect(),
            )
        },
    );
    let retry_after = details.retry_info().and_then(|r| r.retry_delay);
    let mut body = json!({
        "code": code_name(status.code()),
        "message": status.message(),
        "reason": reason,
        "metadata": metadata,
        "retryDelayMs": retry_after.map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
    });
    // A place kept in line (keep_place): the gRPC caller reads it in the
    // trailing metadata, the HTTP caller here.
    if let Some(place) = status
        .metadata()
        .get(PLACE_METADATA)
        .and_then(|v| v.to_str().ok())
    {
        body["place"] = Value::String(place.to_owned());
    }
    Problem {
        status: http_status(status.code()),
        body,
        retry_after,
        allow: None,
    }
}

impl Problem {
    /// A refusal of the gateway's own (no RPC was called): `code` and
    /// `reason` as a gRPC refusal would carry them.
    fn own(status: StatusCode, code: Code, reason: &str, message: String, metadata: Value) -> Self {
        Problem {
            status,
            body: Value::Object(Map::from_iter([
                ("code".to_owned(), Value::from(code_name(code))),
                ("message".to_owned(), Value::String(message)),
                ("reason".to_owned(), Value::from(reason)),
                ("metadata".to_owned(), metadata),
                ("retryDelayMs".to_owned(), Value::from(0)),
            ])),
            retry_after: None,
            allow: None,
        }
    }

    /// 404: no such route; the body lists them.
    pub fn unknown_route(path: &str) -> Self {
        let routes: Vec<String> = ROUTES
            .iter()
            .map(|r| format!("{} {}", r.method, r.path))
            .collect();
        let mut problem = Self::own(
            StatusCode::NOT_FOUND,
            Code::NotFound,
            "UNKNOWN_ROUTE",
            format!(
                "there is no route {path}: the routes are {}",
                routes.join(", ")
            ),
            json!({ "path": path }),
        );
        problem.body["routes"] = json!(routes);
        problem
    }

    /// 405: the route exists with another method.
    pub fn method(route: &Route) -> Self {
        let mut problem = Self::own(
            StatusCode::METHOD_NOT_ALLOWED,
            Code::Unimplemented,
            "METHOD_NOT_ALLOWED",
            format!("{} takes {} only", route.path, route.method),
            json!({ "allow": route.method }),
        );
        problem.allow = Some(route.method);
        problem
    }

    /// 415: a body that is not said to be JSON.
    pub fn media_type() -> Self {
        Self::own(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Code::InvalidArgument,
            "UNSUPPORTED_MEDIA_TYPE",
            "send the request as JSON, with `Content-Type: application/json`".into(),
            json!({}),
        )
    }

    /// 413: a body over `--max-message-size`.
    pub fn too_large(max: usize) -> Self {
        Self::own(
            StatusCode::PAYLOAD_TOO_LARGE,
            Code::OutOfRange,
            "MESSAGE_TOO_LARGE",
            format!(
                "the request body is larger than the broker's --max-message-size ({max} bytes)"
            ),
            json!({ "max_message_size": max.to_string() }),
        )
    }

    /// 408: the body did not arrive within `--http-timeout`.
    pub fn slow_body(timeout: Duration) -> Self {
        let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        Self::own(
            StatusCode::REQUEST_TIMEOUT,
            Code::DeadlineExceeded,
            "REQUEST_TIMEOUT",
            format!("the request body did not arrive within the broker's --http-timeout ({ms} ms)"),
            json!({ "timeout_ms": ms.to_string() }),
        )
    }

    /// 400: the body could not be read.
    pub fn bad_body(why: &str) -> Self {
        Self::own(
            StatusCode::BAD_REQUEST,
            Code::InvalidArgument,
            "BAD_ARGUMENT",
            format!("the request body could not be read: {why}"),
            json!({ "argument": "request" }),
        )
    }

    /// 500: the gateway's own fault.
    pub fn internal(message: String) -> Self {
        Self::own(
            StatusCode::INTERNAL_SERVER_ERROR,
            Code::Internal,
            "INTERNAL",
            message,
            json!({}),
        )
    }
}

impl From<Problem> for Response<Full<Bytes>> {
    fn from(problem: Problem) -> Self {
        let body = serde_json::to_vec(&problem.body).unwrap_or_default();
        let mut response = json(problem.status, &body);
        let headers = response.headers_mut();
        if let Some(allow) = problem.allow {
            headers.insert(header::ALLOW, header::HeaderValue::from_static(allow));
        }
        // Where HTTP gives the delay a header (429, 503): whole seconds,
        // rounded up, so that a client honouring it is never early.
        if let Some(after) = problem.retry_after.filter(|_| {
            matches!(
                problem.status,
                StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
            )
        }) {
            let seconds = after.as_secs() + u64::from(after.subsec_nanos() > 0);
            headers.insert(header::RETRY_AFTER, header::HeaderValue::from(seconds));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    #[test]
    fn a_refusal_reads_the_statuss_reason_metadata_and_delay() {
        let problem = refusal(&Status::from(Error::Held {
            name: "jobs/x".into(),
            holder: "pod-a".into(),
            fence: 7,
            remaining_ms: 1500,
            waited_ms: 0,
        }));
        assert_eq!(problem.status, StatusCode::CONFLICT);
        assert_eq!(problem.body["code"], "ABORTED");
        assert_eq!(problem.body["reason"], "LOCK_HELD");
        assert_eq!(problem.body["metadata"]["holder"], "pod-a");
        assert_eq!(problem.body["metadata"]["fence"], "7");
        assert_eq!(problem.body["retryDelayMs"], 1500);
        let response = Response::from(problem);
        assert!(
            response.headers().get(header::RETRY_AFTER).is_none(),
            "409 has no Retry-After"
        );

        let problem = refusal(&Status::from(Error::ResourceExhausted {
            limit: "tenant-max-rate".into(),
            message: "slow down".into(),
            retry_after: Some(Duration::from_millis(1200)),
        }));
        assert_eq!(problem.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(problem.body["reason"], "LIMIT_REACHED");
        let response = Response::from(problem);
        assert_eq!(response.headers()[header::RETRY_AFTER], "2");
    }

    #[test]
    fn every_code_has_a_status_and_a_name() {
        for (code, status) in [
            (Code::InvalidArgument, 400),
            (Code::Unauthenticated, 401),
            (Code::PermissionDenied, 403),
            (Code::NotFound, 404),
            (Code::Aborted, 409),
            (Code::AlreadyExists, 409),
            (Code::FailedPrecondition, 400),
            (Code::ResourceExhausted, 429),
            (Code::Cancelled, 499),
            (Code::Unavailable, 503),
            (Code::DeadlineExceeded, 504),
            (Code::Internal, 500),
        ] {
            assert_eq!(http_status(code).as_u16(), status, "{code:?}");
            assert!(code_name(code)
                .chars()
                .all(|c| c.is_ascii_uppercase() || c == '_'));
        }
    }
}
