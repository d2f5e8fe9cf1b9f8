//! The one mapping from the broker's [`Error`] to a gRPC status: the edge
//! where the domain's words become the API's codes and details.
//!
//! Every status carries, beside its code and its message (for people), a
//! `google.rpc.ErrorInfo` (domain [`ERROR_DOMAIN`]): a reason code and the
//! facts of the refusal (the holder, the time left, the limit and its
//! value), and a `google.rpc.RetryInfo` where a retry makes sense after a
//! known time. Clients read those, never the message: a message is free to
//! change, a reason and its metadata keys are the API (the proto's
//! "Errors" section lists them). A Session stream's error carries the same
//! ([`session_error`]).

use std::{collections::HashMap, time::Duration};

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::error::Error;

/// The `domain` of every `google.rpc.ErrorInfo` the broker sends.
pub const ERROR_DOMAIN: &str = "leasehold.v1";

/// The gRPC code for `error`; the single place that decides it.
pub fn code(error: &Error) -> Code {
    match error {
        Error::InvalidArgument(_) | Error::BadArgument { .. } => Code::InvalidArgument,
        Error::Held { .. } | Error::LockDelay { .. } | Error::Queued { .. } => Code::Aborted,
        Error::PlaceKept { refusal, .. } => code(refusal),
        Error::Revoked { .. } => Code::NotFound,
        Error::Unauthenticated(_) => Code::Unauthenticated,
        Error::PermissionDenied(_) => Code::PermissionDenied,
        Error::NotHeld { .. } => Code::NotFound,
        Error::NotOwner { .. } => Code::FailedPrecondition,
        Error::ResourceExhausted { .. } => Code::ResourceExhausted,
        Error::Unavailable(_) => Code::Unavailable,
        Error::Cancelled => Code::Cancelled,
        Error::DeadlineExceeded { .. } => Code::DeadlineExceeded,
        Error::Internal(_) => Code::Internal,
    }
}

/// What a program reads of a refusal: the `google.rpc.ErrorInfo` reason and
/// metadata, and the `google.rpc.RetryInfo` delay if any.
#[derive(Debug, PartialEq, Eq)]
pub struct Detail {
    /// A reason code, UPPER_SNAKE_CASE, stable.
    pub reason: &'static str,
    /// The refusal's facts; durations in milliseconds, as decimal strings.
    pub metadata: Vec<(&'static str, String)>,
    /// When a retry may succeed, if the broker knows.
    pub retry_after: Option<Duration>,
}

/// How soon a retry of a call the store or the broker could not serve
/// (UNAVAILABLE) makes sense: at once on another replica, after a moment
/// on this one.
const UNAVAILABLE_RETRY: Duration = Duration::from_millis(100);

/// The detail of `error`; the single place that decides reasons and keys.
pub fn detail(error: &Error) -> Detail {
    let make = |reason, metadata, retry_after| Detail {
        reason,
        metadata,
        retry_after,
    };
    let ms = |d: u64| d.to_string();
    match error {
        Error::InvalidArgument(_) => {
            make("BAD_ARGUMENT", vec![("argument", "request".into())], None)
        }
        Error::BadArgument {
            argument, facts, ..
        } => {
            let mut metadata = vec![("argument", (*argument).to_owned())];
            metadata.extend(facts.iter().cloned());
            make("BAD_ARGUMENT", metadata, None)
        }
        Error::Held {
            name,
            holder,
            fence,
            remaining_ms,
            waited_ms,
        } => make(
            "LOCK_HELD",
            vec![
                ("name", name.clone()),
                ("holder", holder.clone()),
                ("fence", fence.to_string()),
                ("remaining_ms", ms(*remaining_ms)),
                ("waited_ms", ms(*waited_ms)),
            ],
            Some(Duration::from_millis(*remaining_ms)),
        ),
        Error::LockDelay {
            name,
            fence,
            remaining_ms,
            waited_ms,
        } => make(
            "LOCK_DELAY",
            vec![
                ("name", name.clone()),
                ("fence", fence.to_string()),
                ("remaining_ms", ms(*remaining_ms)),
                ("waited_ms", ms(*waited_ms)),
            ],
            Some(Duration::from_millis(*remaining_ms)),
        ),
        Error::Queued {
            name,
            queued,
            waited_ms,
        } => make(
            "LINE_AHEAD",
            vec![
                ("name", name.clone()),
                ("queued", queued.to_string()),
                ("waited_ms", ms(*waited_ms)),
            ],
            None,
        ),
        Error::PlaceKept {
            refusal, kept_ms, ..
        } => {
            let mut inner = detail(refusal);
            inner.metadata.push(("place_kept_ms", ms(*kept_ms)));
            inner
        }
        Error::Revoked { name, fence } => make(
            "LEASE_REVOKED",
            vec![("name", name.clone()), ("fence", fence.to_string())],
            None,
        ),
        Error::NotHeld { name } => make("LEASE_NOT_HELD", vec![("name", name.clone())], None),
        Error::NotOwner { name, fence } => make(
            "NOT_OWNER",
            vec![("name", name.clone()), ("fence", fence.to_string())],
            None,
        ),
        Error::Unauthenticated(_) => make("UNAUTHENTICATED", vec![], None),
        Error::PermissionDenied(_) => make("PERMISSION_DENIED", vec![], None),
        Error::ResourceExhausted {
            limit, retry_after, ..
        } => make(
            "LIMIT_REACHED",
            vec![("limit", limit.clone())],
            *retry_after,
        ),
        Error::Unavailable(_) => make("UNAVAILABLE", vec![], Some(UNAVAILABLE_RETRY)),
        Error::Cancelled => make("CANCELLED", vec![], None),
        Error::DeadlineExceeded { timeout_ms } => make(
            "REQUEST_TIMEOUT",
            vec![("timeout_ms", ms(*timeout_ms))],
            None,
        ),
        Error::Internal(_) => make("INTERNAL", vec![], None),
    }
}

impl From<Error> for Status {
    fn from(err: Error) -> Self {
        let Detail {
            reason,
            metadata,
            retry_after,
        } = detail(&err);
        let info: HashMap<String, String> = metadata
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        let mut details = ErrorDetails::with_error_info(reason, ERROR_DOMAIN, info);
        if let Some(after) = retry_after {
            details.set_retry_info(Some(after));
        }
        let mut metadata = tonic::metadata::MetadataMap::new();
        if let Error::PlaceKept { place, .. } = &err {
            // A place is 32 hex characters (generated or validated), always
            // a valid ASCII value; were it not, the caller gets the refusal
            // without it and its place simply lapses.
            if let Ok(value) = place.0.parse() {
                metadata.insert(PLACE_METADATA, value);
            }
        }
        Status::with_error_details_and_metadata(code(&err), err.to_string(), details, metadata)
    }
}

/// A failed request's answer on a Session stream: what the unary call's
/// status would carry (code, message, kept place, reason, metadata, retry
/// delay), from the same mapping.
pub fn session_error(err: Error) -> crate::proto::SessionError {
    let Detail {
        reason,
        metadata,
        retry_after,
    } = detail(&err);
    let code = code(&err) as i32;
    let message = err.to_string();
    let place = match err {
        Error::PlaceKept { place, .. } => place.0,
        _ => String::new(),
    };
    crate::proto::SessionError {
        code,
        message,
        place,
        reason: reason.to_owned(),
        metadata: metadata
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect(),
        retry_delay_ms: retry_after.map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
    }
}

/// The trailing metadata that carries a kept place (keep_place) back to
/// its caller.
pub const PLACE_METADATA: &str = "leasehold-place";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_message_names_holder_time_left_and_how_to_wait() {
        let err = Error::Held {
            name: "jobs/nightly".into(),
            holder: "pod-a".into(),
            fence: 7,
            remaining_ms: 1200,
            waited_ms: 0,
        };
        let status = Status::from(err);
        assert_eq!(status.code(), Code::Aborted);
        assert!(status.message().contains("'pod-a'"), "{}", status.message());
        assert!(status.message().contains("1200 ms"), "{}", status.message());
        assert!(
            status.message().contains("set a wait"),
            "{}",
            status.message()
        );
    }

    #[test]
    fn a_kept_place_rides_in_metadata_not_in_the_message() {
        let place = "0123456789abcdef0123456789abcdef";
        let err = Error::PlaceKept {
            refusal: Box::new(Error::Queued {
                name: "n".into(),
                queued: 2,
                waited_ms: 100,
            }),
            place: crate::error::KeptPlace(place.into()),
            kept_ms: 3_000,
        };
        assert!(!format!("{err:?}").contains(place));
        let status = Status::from(err);
        assert_eq!(status.code(), Code::Aborted);
        assert!(!status.message().contains(place), "{}", status.message());
        assert!(status.message().contains("kept"), "{}", status.message());
        assert_eq!(
            status
                .metadata()
                .get(PLACE_METADATA)
                .map(|v| v.to_str().ok()),
            Some(Some(place))
        );
    }

    #[test]
    fn every_variant_has_its_own_code() {
        let cases = [
            (Error::InvalidArgument("x".into()), Code::InvalidArgument),
            (Error::Unauthenticated("x".into()), Code::Unauthenticated),
            (Error::PermissionDenied("x".into()), Code::PermissionDenied),
            (Error::NotHeld { name: "a".into() }, Code::NotFound),
            (
                Error::NotOwner {
                    name: "a".into(),
                    fence: 1,
                },
                Code::FailedPrecondition,
            ),
            (
                Error::exhausted("max-waiters", "x"),
                Code::ResourceExhausted,
            ),
            (Error::Unavailable("x".into()), Code::Unavailable),
            (Error::Cancelled, Code::Cancelled),
            (
                Error::DeadlineExceeded { timeout_ms: 5 },
                Code::DeadlineExceeded,
            ),
            (Error::Internal("x".into()), Code::Internal),
        ];
        for (err, code) in cases {
            assert_eq!(Status::from(err).code(), code);
        }
    }
}
