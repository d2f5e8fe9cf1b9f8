//! What can go wrong: the errors of calls, and why a lease was lost.

use std::{collections::HashMap, fmt, time::Duration};

use tonic::{Code, Status};
use tonic_types::StatusExt;

/// Why a lease was lost. One spelling everywhere: [`LossReason::as_str`] is
/// the proto's `LossReason` name (`LOSS_REASON_EXPIRED`...) without its
/// prefix, and [`fmt::Display`] says it in words.
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
    /// was unreachable, or the process was paused). The client's own: the
    /// proto has no such reason.
    DeadlinePassed,
}

impl LossReason {
    /// The reason's code: `EXPIRED`, `NOT_OWNER`, `STORE_LOST`, `REVOKED`
    /// (the proto's names without `LOSS_REASON_`), or `DEADLINE_PASSED`.
    pub fn as_str(self) -> &'static str {
        match self {
            LossReason::Expired => "EXPIRED",
            LossReason::NotOwner => "NOT_OWNER",
            LossReason::StoreLost => "STORE_LOST",
            LossReason::Revoked => "REVOKED",
            LossReason::DeadlinePassed => "DEADLINE_PASSED",
        }
    }
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

/// A call the broker refused, as a program reads it: the gRPC code, the
/// broker's reason code and facts (its `google.rpc.ErrorInfo`: `LOCK_HELD`
/// with the holder and the time left, `BAD_ARGUMENT` with the argument and
/// its limit...; the proto's "Errors" lists them), when a retry may
/// succeed, and the message for people. Displayed, it is the message alone.
#[derive(Clone, Debug)]
pub struct Refusal {
    code: Code,
    message: String,
    reason: String,
    metadata: HashMap<String, String>,
    retry_after: Option<Duration>,
    place: Option<String>,
}

/// The trailing metadata of an ABORTED Acquire that kept its place.
pub(crate) const PLACE_METADATA: &str = "leasehold-place";

impl Refusal {
    /// The gRPC code.
    pub fn code(&self) -> Code {
        self.code
    }

    /// The broker's message, for people.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The broker's reason code (`LOCK_HELD`, `BAD_ARGUMENT`...); empty
    /// from a broker that sends none (before error details) or for a
    /// failure that never reached one.
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// One fact of the refusal (`holder`, `remaining_ms`, `max_wait_ms`...).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.metadata.get(key).map(String::as_str)
    }

    /// A fact that is a number of milliseconds, as a duration.
    pub fn duration(&self, key: &str) -> Option<Duration> {
        self.get(key)?.parse().ok().map(Duration::from_millis)
    }

    /// Every fact.
    pub fn metadata(&self) -> &HashMap<String, String> {
        &self.metadata
    }

    /// When a retry may succeed, if the broker said.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// The place in line kept for the caller (keep_place), if any.
    pub(crate) fn place(&self) -> Option<&str> {
        self.place.as_deref()
    }

    /// A refusal made here, not by a broker.
    pub(crate) fn local(code: Code, message: impl Into<String>) -> Refusal {
        Refusal {
            code,
            message: message.into(),
            reason: String::new(),
            metadata: HashMap::new(),
            retry_after: None,
            place: None,
        }
    }

    /// The refusal `status` carries: its details read, its message cleaned
    /// of what a transport adds (tonic repeats the source of a connection
    /// error: "tcp connect error: tcp connect error").
    pub(crate) fn from_status(status: &Status) -> Refusal {
        let details = status.get_error_details();
        let (reason, metadata) = match details.error_info() {
            Some(info) => (
                info.reason.clone(),
                info.metadata
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            ),
            None => (String::new(), HashMap::new()),
        };
        let retry_after = details.retry_info().and_then(|r| r.retry_delay);
        let place = status
            .metadata()
            .get(PLACE_METADATA)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        Refusal {
            code: status.code(),
            message: dedupe(status.message()),
            reason,
            metadata,
            retry_after,
            place,
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// `text` with a part repeated right after itself said once ("a: a: b" ->
/// "a: b").
fn dedupe(text: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in text.split(": ") {
        if parts.last() != Some(&part) {
            parts.push(part);
        }
    }
    parts.join(": ")
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
    /// The lock is held by someone else (and any wait ran out): ABORTED,
    /// with the holder and the time left in its facts.
    #[error("{0}")]
    NotAcquired(Box<Refusal>),
    /// The lease was already lost.
    #[error("the lease was lost: {0}")]
    Lost(LossReason),
    /// The broker refused the call (or the call failed on its way).
    #[error("{0}")]
    Refused(Box<Refusal>),
}

impl ClientError {
    /// The refusal, for a call the broker (or the transport) refused.
    pub fn refusal(&self) -> Option<&Refusal> {
        match self {
            ClientError::NotAcquired(r) | ClientError::Refused(r) => Some(r),
            _ => None,
        }
    }

    /// The gRPC code of a refusal.
    pub fn code(&self) -> Option<Code> {
        self.refusal().map(Refusal::code)
    }
}

impl From<Refusal> for ClientError {
    fn from(refusal: Refusal) -> Self {
        match refusal.code {
            Code::Aborted => ClientError::NotAcquired(Box::new(refusal)),
            _ => ClientError::Refused(Box::new(refusal)),
        }
    }
}

impl From<Status> for ClientError {
    fn from(status: Status) -> Self {
        Refusal::from_status(&status).into()
    }
}

pub(crate) fn source_chain(e: &dyn std::error::Error) -> String {
    let mut parts = Vec::new();
    let mut source = e.source();
    while let Some(s) = source {
        parts.push(s.to_string());
        source = s.source();
    }
    dedupe(&parts.join(": "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_part_is_said_once() {
        assert_eq!(
            dedupe("tcp connect error: tcp connect error: Connection refused (os error 111)"),
            "tcp connect error: Connection refused (os error 111)"
        );
        assert_eq!(dedupe("a: b: a"), "a: b: a");
    }

    #[test]
    fn a_refusal_shows_its_message_alone() {
        let status = Status::invalid_argument("a wait of 10 min is above the maximum");
        let e = ClientError::from(status);
        assert_eq!(e.to_string(), "a wait of 10 min is above the maximum");
        assert_eq!(e.code(), Some(Code::InvalidArgument));
    }
}
