//! The one mapping from the broker's [`Error`] to a gRPC status: the edge
//! where the domain's words become the API's codes.

use tonic::{Code, Status};

use crate::error::Error;

/// The gRPC code for `error`; the single place that decides it.
pub fn code(error: &Error) -> Code {
    match error {
        Error::InvalidArgument(_) => Code::InvalidArgument,
        Error::Held { .. } | Error::LockDelay { .. } | Error::Queued { .. } => Code::Aborted,
        Error::PlaceKept { refusal, .. } => code(refusal),
        Error::Revoked { .. } => Code::NotFound,
        Error::Unauthenticated(_) => Code::Unauthenticated,
        Error::PermissionDenied(_) => Code::PermissionDenied,
        Error::NotHeld { .. } => Code::NotFound,
        Error::NotOwner { .. } => Code::FailedPrecondition,
        Error::ResourceExhausted(_) => Code::ResourceExhausted,
        Error::Unavailable(_) => Code::Unavailable,
        Error::Cancelled => Code::Cancelled,
        Error::DeadlineExceeded { .. } => Code::DeadlineExceeded,
        Error::Internal(_) => Code::Internal,
    }
}

/// A failed request's answer on a Session stream: what the unary call's
/// status would carry (code, message, kept place), from the same mapping.
pub fn session_error(err: Error) -> crate::proto::SessionError {
    let status = Status::from(err);
    crate::proto::SessionError {
        code: status.code() as i32,
        message: status.message().to_owned(),
        place: status
            .metadata()
            .get(PLACE_METADATA)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned(),
    }
}

/// The trailing metadata that carries a kept place (keep_place) back to
/// its caller.
pub const PLACE_METADATA: &str = "leasehold-place";

impl From<Error> for Status {
    fn from(err: Error) -> Self {
        let status = Status::new(code(&err), err.to_string());
        let Error::PlaceKept { place, .. } = &err else {
            return status;
        };
        let mut metadata = tonic::metadata::MetadataMap::new();
        // A place is 32 hex characters (generated or validated), always a
        // valid ASCII value; were it not, the caller gets the refusal
        // without it and its place simply lapses.
        if let Ok(value) = place.0.parse() {
            metadata.insert(PLACE_METADATA, value);
        }
        Status::with_metadata(status.code(), status.message(), metadata)
    }
}

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
            status.message().contains("wait_timeout_ms"),
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
                Error::ResourceExhausted("x".into()),
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
