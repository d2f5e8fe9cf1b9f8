//! What can go wrong: the errors of calls, and why a lease was lost.

use std::fmt;

use tonic::Code;

/// Why a lease was lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LossReason {
    /// The broker found the lease expired.
    Expired,
    /// The lease expired and the lock was granted to someone else.
    NotOwner,
    /// The store lost the lease (restarted empty, flushed).
    StoreLost,
    /// An operator revoked the lease.
    Revoked,
    /// No renewal confirmed the lease before its local deadline (the broker
    /// was unreachable, or the process was paused).
    DeadlinePassed,
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LossReason::Expired => "expired",
            LossReason::NotOwner => "granted to another owner",
            LossReason::StoreLost => "lost by the store",
            LossReason::Revoked => "revoked",
            LossReason::DeadlinePassed => "deadline passed without a confirmed renewal",
        })
    }
}

/// What can go wrong in the client.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No connection could be made to any broker: worth retrying later.
    #[error("cannot reach the broker: {0}")]
    Connect(String),
    /// The client's own settings are unusable (a malformed or missing
    /// broker URL, TLS settings tonic refuses, a token a header cannot
    /// carry): retrying cannot help, so it is kept apart from
    /// [`ClientError::Connect`].
    #[error("{0}")]
    Config(String),
    /// The lock is held by someone else (and any wait ran out).
    #[error("{0}")]
    NotAcquired(String),
    /// The lease was already lost.
    #[error("the lease was lost: {0}")]
    Lost(LossReason),
    /// The broker refused the call.
    #[error("{}: {}", .0.code(), .0.message())]
    Status(tonic::Status),
}

impl From<tonic::Status> for ClientError {
    fn from(status: tonic::Status) -> Self {
        match status.code() {
            Code::Aborted => ClientError::NotAcquired(status.message().to_owned()),
            _ => ClientError::Status(status),
        }
    }
}

pub(crate) fn source_chain(e: &dyn std::error::Error) -> String {
    let mut parts = Vec::new();
    let mut source = e.source();
    while let Some(s) = source {
        parts.push(s.to_string());
        source = s.source();
    }
    parts.join(": ")
}
