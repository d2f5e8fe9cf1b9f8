//! The one error type of the broker, and its one mapping to a gRPC status.
//!
//! Every layer returns [`Error`]; handlers use `?` and the conversion below
//! decides the status code, so the code a client sees for a given failure is
//! the same whichever RPC or code path produced it (etcd's `toGRPCErrorMap`).

use tonic::{Code, Status};

/// Shorthand for results in this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong serving a request.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request field is outside its limits; the message names the field and
    /// the limit.
    #[error("{0}")]
    InvalidArgument(String),

    /// Acquire did not obtain the lock: it is held by someone else.
    #[error(
        "lock '{name}' is held by {holder} (fence {fence}) for another {remaining_ms} ms; \
         waited {waited_ms} ms{hint}",
        holder = display_holder(holder),
        hint = if *waited_ms == 0 { "; set wait_timeout_ms to wait for it" } else { "" }
    )]
    Held {
        /// The lock name.
        name: String,
        /// The current holder's label.
        holder: String,
        /// The current holder's fence.
        fence: u64,
        /// Time left on the current lease.
        remaining_ms: u64,
        /// How long this call waited before giving up.
        waited_ms: u64,
    },

    /// Acquire did not obtain the lock: it is in its lock-delay after its
    /// previous holder lost it.
    #[error(
        "lock '{name}' is in its lock-delay for another {remaining_ms} ms: its previous lease \
         (fence {fence}) ended without a release; waited {waited_ms} ms"
    )]
    LockDelay {
        /// The lock name.
        name: String,
        /// The fence of the lease that was lost.
        fence: u64,
        /// Time until the delay ends.
        remaining_ms: u64,
        /// How long this call waited before giving up.
        waited_ms: u64,
    },

    /// Acquire did not obtain the lock: it is free, but callers queued
    /// earlier come first.
    #[error(
        "lock '{name}' has {queued} callers waiting for it in line, who come first; \
         waited {waited_ms} ms{hint}",
        hint = if *waited_ms == 0 { "; set wait_timeout_ms to join the line" } else { "" }
    )]
    Queued {
        /// The lock name.
        name: String,
        /// The queue's length.
        queued: u64,
        /// How long this call waited before giving up.
        waited_ms: u64,
    },

    /// Renew or release of a lease that an operator revoked.
    #[error("the lease on '{name}' (fence {fence}) was revoked by an operator")]
    Revoked {
        /// The lock name.
        name: String,
        /// The revoked lease's fence.
        fence: u64,
    },

    /// The request carries no credential this broker accepts; the message
    /// says what it expects (never what was sent).
    #[error("{0}")]
    Unauthenticated(String),

    /// The operation is not allowed on this broker, or not to this
    /// credential; the message says why.
    #[error("{0}")]
    PermissionDenied(String),

    /// Renew or release of a lease that no longer exists.
    #[error(
        "no lease on '{name}': it expired, was released, or the store lost it; \
         acquire it again (and do not trust writes made after its deadline)"
    )]
    NotHeld {
        /// The lock name.
        name: String,
    },

    /// Renew or release with an owner token that is not the current holder's.
    #[error(
        "the lease on '{name}' belongs to another owner (current fence {fence}): \
         your lease ended and the lock was granted again"
    )]
    NotOwner {
        /// The lock name.
        name: String,
        /// The current holder's fence.
        fence: u64,
    },

    /// A configured capacity limit was reached; the message names it.
    #[error("{0}")]
    ResourceExhausted(String),

    /// The store did not answer in time, or the broker is shutting down.
    /// Safe to retry, on any replica.
    #[error("{0}")]
    Unavailable(String),

    /// The caller went away before the call finished.
    #[error("the call was cancelled by the client")]
    Cancelled,

    /// A bug or an unexpected answer from the store.
    #[error("internal error: {0}")]
    Internal(String),
}

fn display_holder(holder: &str) -> String {
    if holder.is_empty() {
        "an unnamed holder".to_owned()
    } else {
        format!("'{holder}'")
    }
}

impl Error {
    /// The gRPC code for this error; the single place that decides it.
    pub fn code(&self) -> Code {
        match self {
            Error::InvalidArgument(_) => Code::InvalidArgument,
            Error::Held { .. } | Error::LockDelay { .. } | Error::Queued { .. } => Code::Aborted,
            Error::Revoked { .. } => Code::NotFound,
            Error::Unauthenticated(_) => Code::Unauthenticated,
            Error::PermissionDenied(_) => Code::PermissionDenied,
            Error::NotHeld { .. } => Code::NotFound,
            Error::NotOwner { .. } => Code::FailedPrecondition,
            Error::ResourceExhausted(_) => Code::ResourceExhausted,
            Error::Unavailable(_) => Code::Unavailable,
            Error::Cancelled => Code::Cancelled,
            Error::Internal(_) => Code::Internal,
        }
    }
}

impl From<Error> for Status {
    fn from(err: Error) -> Self {
        Status::new(err.code(), err.to_string())
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
            (Error::Internal("x".into()), Code::Internal),
        ];
        for (err, code) in cases {
            assert_eq!(Status::from(err).code(), code);
        }
    }
}
