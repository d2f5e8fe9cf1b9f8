//! Leader election: who leads, and the stream of changes.

use crate::ClientError;

/// An election's leader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderInfo {
    /// The value it campaigned with.
    pub value: String,
    /// Its term (its lease's fence).
    pub term: u64,
}

impl LeaderInfo {
    pub(crate) fn from_message(r: leasehold_proto::LeaderResponse) -> Option<Self> {
        r.present.then_some(LeaderInfo {
            value: r.value,
            term: r.term,
        })
    }

    /// Observe's message carries the same fields as Leader's under its own
    /// name (every call has its own message types).
    pub(crate) fn from_observation(r: leasehold_proto::ObserveResponse) -> Option<Self> {
        r.present.then_some(LeaderInfo {
            value: r.value,
            term: r.term,
        })
    }
}

/// The changes of an election's leadership (see [`Client::observe`]).
pub struct Observation {
    pub(crate) stream: tonic::Streaming<leasehold_proto::ObserveResponse>,
}

impl Observation {
    /// The next leadership (`None` inside: no leader); `None` when the
    /// stream ended (the broker shut down: observe again).
    pub async fn next(&mut self) -> Option<Result<Option<LeaderInfo>, ClientError>> {
        match self.stream.message().await {
            Ok(Some(r)) => Some(Ok(LeaderInfo::from_observation(r))),
            Ok(None) => None,
            Err(status) => Some(Err(status.into())),
        }
    }
}
