"""Every name the client takes from the generated stubs that a revision of
the .proto may rename: the service's stub, the enum values of LeaseStatus
and LossReason, Observe's messages. Kept here so a rename touches one file."""

from __future__ import annotations

from typing import Optional

from ._proto import leasehold_pb2 as pb
from ._proto import leasehold_pb2_grpc as pb_grpc
from .errors import LossReason

#: The generated stub class of the LeaseholdService.
Stub = pb_grpc.LeaseholdServiceStub

_State = pb.LeaseStatus.State
ALIVE = _State.Value("STATE_ALIVE")
LOST = _State.Value("STATE_LOST")
REJECTED = _State.Value("STATE_REJECTED")

#: LossReason values the broker names; EXPIRED and unspecified are decided
#: by the caller (see _heartbeat.loss_reason).
NAMED_LOSSES = {
    pb.LossReason.Value("LOSS_REASON_NOT_OWNER"): LossReason.NOT_OWNER,
    pb.LossReason.Value("LOSS_REASON_STORE_LOST"): LossReason.STORE_LOST,
    pb.LossReason.Value("LOSS_REASON_REVOKED"): LossReason.REVOKED,
}


def named_loss(reason: int) -> Optional[LossReason]:
    return NAMED_LOSSES.get(reason)


def observe_request(election: str):
    """The request of an Observe call."""
    return pb.ObserveRequest(election=election)
