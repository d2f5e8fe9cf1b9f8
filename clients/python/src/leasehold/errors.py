"""Exceptions raised by the client.

Every exception raised for a failed call carries the gRPC status code, the
broker's message (for people: it says what is wrong and names the limit and
the broker flag involved) and, for programs, what the broker's status
details say (its ``google.rpc.ErrorInfo`` and ``google.rpc.RetryInfo``, or
a Session stream's ``SessionError``): a stable ``reason`` code, its
``metadata`` (the holder, the time left, the limit...) and ``retry_after``.
The client reads refusals from those details, never from the message.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
from typing import Any, Dict, Mapping, Optional

import grpc


class LossReason(enum.Enum):
    """Why a lease was lost (mirrors the Rust client's ``LossReason``).

    The member's name is the reason's one spelling, shared by every client:
    the proto's ``LossReason`` name without ``LOSS_REASON_`` (``EXPIRED``,
    ``NOT_OWNER``, ``STORE_LOST``, ``REVOKED``), or the clients' own
    ``DEADLINE_PASSED`` (and ``RELEASED``); ``str()`` says it in words."""

    #: The broker found the lease expired.
    EXPIRED = "expired"
    #: The lease expired and the lock was granted to another owner since.
    NOT_OWNER = "granted to another owner"
    #: The store lost the lease before its TTL could have run out (Redis
    #: restarted empty, was flushed, the broker's memory store restarted).
    STORE_LOST = "lost by the store"
    #: An operator revoked the lease.
    REVOKED = "revoked"
    #: No renewal confirmed the lease before its local deadline: the broker
    #: was unreachable, or this process was paused. The broker may not have
    #: expired it yet, but it could at any moment, so it counts as lost.
    DEADLINE_PASSED = "deadline passed without a confirmed renewal"
    #: Released by this client: only reported by ``Lease.check()`` after
    #: ``release()``, never to lost callbacks (a release is not a loss).
    RELEASED = "released by this client"

    def __str__(self) -> str:
        return self.value


@dataclasses.dataclass(frozen=True)
class Detail:
    """What a program reads of a refusal: the broker's reason code, its
    metadata, and how long to wait before a retry may succeed (seconds;
    None when the broker does not say). Empty for a failure no broker
    explained (a connection that could not be made, a local deadline) or a
    broker from before error details."""

    reason: str = ""
    metadata: Mapping[str, str] = dataclasses.field(default_factory=dict)
    retry_after: Optional[float] = None


#: The ErrorInfo domain of the broker's refusals.
DOMAIN = "leasehold.v1"

#: The trailer that carries a status's details (a serialized google.rpc.Status).
_DETAILS_TRAILER = "grpc-status-details-bin"


def _decode(blob: bytes) -> Detail:
    """The ErrorInfo and RetryInfo of a serialized google.rpc.Status."""
    # googleapis-common-protos: the google.rpc messages.
    from google.protobuf.message import DecodeError
    from google.rpc import error_details_pb2, status_pb2

    try:
        status = status_pb2.Status.FromString(blob)
    except DecodeError:
        return Detail()
    reason, metadata, retry_after = "", {}, None
    for any_ in status.details:
        if any_.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            any_.Unpack(info)
            # Another domain's (a proxy's, say) is not the broker's word.
            if info.domain == DOMAIN and not reason:
                reason, metadata = info.reason, dict(info.metadata)
        elif any_.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            any_.Unpack(retry)
            retry_after = retry.retry_delay.seconds + retry.retry_delay.nanos / 1e9
    return Detail(reason, metadata, retry_after)


def detail_of(error: BaseException) -> Detail:
    """What the broker's status details say of a failed call: a unary
    call's (the ``grpc-status-details-bin`` trailer), or a Session
    request's (its ``SessionError``, kept on the error as ``detail``)."""
    detail = getattr(error, "detail", None)
    if isinstance(detail, Detail):
        return detail
    try:
        trailing = error.trailing_metadata()  # type: ignore[attr-defined]
    except Exception:  # not a call's error
        return Detail()
    return detail_from_trailers(trailing)


def detail_from_trailers(trailing) -> Detail:
    """What a call's trailing metadata says in ``grpc-status-details-bin``."""
    for key, value in trailing or ():
        if key == _DETAILS_TRAILER and isinstance(value, (bytes, bytearray)):
            return _decode(bytes(value))
    return Detail()


class LeaseholdError(Exception):
    """Base class of the client's errors.

    * ``code``: the gRPC status code (``None`` for errors found locally).
    * ``details``: the broker's message as it sent it (or gRPC's, for a call
      that reached no broker).
    * ``reason``: the broker's reason code (``BAD_ARGUMENT``, ``LOCK_HELD``,
      ``LIMIT_REACHED``...: the proto's "Errors" section lists them); ""
      when no broker explained the failure. (:class:`LeaseLost`'s is a
      :class:`LossReason`.)
    * ``metadata``: the refusal's facts, every value a string, durations in
      milliseconds (``{"argument": "ttl", "ttl_ms": "100", "min_ttl_ms":
      "500", ...}``, ``{"holder": ..., "remaining_ms": ...}``).
    * ``retry_after``: seconds to wait before a retry may succeed, when the
      broker says (the time left on the lease that holds the lock, a rate
      cap, a store that did not answer); else ``None``.

    The message (``str(e)``) is for people; programs read the fields.
    """

    def __init__(
        self,
        message: str,
        code: Optional[grpc.StatusCode] = None,
        details: str = "",
        *,
        reason: str = "",
        metadata: Optional[Mapping[str, str]] = None,
        retry_after: Optional[float] = None,
    ):
        super().__init__(message)
        self.code = code
        self.details = details
        self.reason: Any = reason
        self.metadata: Dict[str, str] = dict(metadata or {})
        self.retry_after = retry_after


class NotAcquired(LeaseholdError):
    """The lock is held by someone else and the wait (if any) ran out.

    The broker answered ABORTED; ``reason`` is ``LOCK_HELD`` (``metadata``:
    ``holder``, ``fence``, ``remaining_ms``, ``waited_ms``; ``retry_after``
    is the time left on its lease), ``LOCK_DELAY`` (the name is in its
    lock-delay: ``remaining_ms``; ``retry_after``) or ``LINE_AHEAD`` (callers
    queued earlier come first: ``queued``). The message says the same in
    words.
    """


class LeaseLost(LeaseholdError):
    """The lease is gone: stop acting on it, acquire again if needed.

    ``reason`` is a :class:`LossReason` (``reason.name``: ``EXPIRED``,
    ``NOT_OWNER``, ``REVOKED``...). Raised by ``Lease.check()`` and by
    ``Lease.release()`` when the lease was lost before it was released: then
    the lease ran out while you held it, and writes made near the end may
    have raced with the next holder (which is what fences are for).
    ``metadata`` is the broker's refusal's (``name``, ``fence``) when a
    release found the lease gone.
    """

    def __init__(
        self,
        reason: LossReason,
        message: str = "",
        code: Optional[grpc.StatusCode] = None,
        metadata: Optional[Mapping[str, str]] = None,
    ):
        text = f"the lease was lost: {reason}"
        if message:
            text += f" ({message})"
        super().__init__(text, code, message, metadata=metadata)
        self.reason = reason


#: The client's own name of each argument the broker names in a
#: BAD_ARGUMENT refusal (its metadata ``argument``); None: not one of the
#: caller's (``place``, ``request``).
_PARAMETERS: Mapping[str, Optional[str]] = {
    "name": "name",
    "ttl": "ttl",
    "wait": "wait",
    "lock_delay": "lock_delay",
    "limit": "limit",
    "holder": "holder",
    "owner_token": "owner_token",
    "value": "value",
    "election": "election",
    "tenant": "tenant",
    "prefix": "prefix",
    "page_size": "page_size",
    "page_token": "page_token",
    "place": None,
    "request": None,
}

#: Arguments that are durations, and the metadata key of the value sent.
_DURATIONS = {"ttl": "ttl_ms", "wait": "wait_ms", "lock_delay": "lock_delay_ms"}

#: Arguments whose value is never shown (a secret).
_SECRETS = {"owner_token"}

#: Longest string value shown whole in a message.
_SHOWN = 40


def _shown(argument: str, metadata: Mapping[str, str], given: Mapping[str, Any]) -> Optional[str]:
    """The value of ``argument`` as the caller wrote it (seconds, not
    milliseconds), or None when there is none to show."""
    if argument in _SECRETS:
        return None
    if argument in given:
        value = given[argument]
        if isinstance(value, datetime.timedelta):
            value = value.total_seconds()
        if isinstance(value, str):
            return repr(value if len(value) <= _SHOWN else value[: _SHOWN // 2] + "…")
        if isinstance(value, float):
            return f"{value:g}"
        return repr(value)
    sent = metadata.get(_DURATIONS.get(argument, argument), "")
    if not sent.isdigit():
        return None
    return f"{int(sent) / 1000:g}" if argument in _DURATIONS else sent


def _message(code: Optional[grpc.StatusCode], details: str, detail: Detail, given: Mapping[str, Any]) -> str:
    """The message of a failed call, for people: the broker's, in the
    caller's words (a BAD_ARGUMENT names the parameter, e.g. ``ttl=0.1:
    a TTL of 100 ms is below ...``); gRPC's, cleaned, for a call that
    reached no broker."""
    if detail.reason:
        if detail.reason == "BAD_ARGUMENT":
            argument = detail.metadata.get("argument", "")
            parameter = _PARAMETERS.get(argument, argument or None)
            if parameter:
                shown = _shown(argument, detail.metadata, given)
                return f"{parameter}={shown}: {details}" if shown is not None else f"{parameter}: {details}"
        return details
    if code == grpc.StatusCode.ABORTED:
        return details  # the lock is held: the broker's words say by whom
    # Deferred import: _brokers imports the generated stubs' module.
    from ._brokers import connection_failure

    failure = connection_failure(code, details)
    if failure is not None:
        return failure
    name = code.name if code is not None else "UNKNOWN"
    if code == grpc.StatusCode.DEADLINE_EXCEEDED and details.lower().startswith("deadline exceeded"):
        # gRPC's own words for its deadline: they only repeat the code.
        return "DEADLINE_EXCEEDED: no answer from the broker within the call's timeout"
    return f"{name}: {details}" if details else name


def from_rpc_error(error: BaseException, given: Optional[Mapping[str, Any]] = None) -> LeaseholdError:
    """Turns a failed call into the matching exception. ``given``: the
    caller's arguments by the broker's name of each (``ttl``, ``holder``...),
    so that a refusal of one names it as the caller wrote it."""
    code = error.code() if hasattr(error, "code") else None  # type: ignore[attr-defined]
    details = (error.details() if hasattr(error, "details") else "") or ""  # type: ignore[attr-defined]
    detail = detail_of(error)
    message = _message(code, details, detail, given or {})
    kind = NotAcquired if code == grpc.StatusCode.ABORTED else LeaseholdError
    if kind is NotAcquired and not message:
        message = "the lock is held"
    return kind(
        message,
        code,
        details,
        reason=detail.reason,
        metadata=detail.metadata,
        retry_after=detail.retry_after,
    )


def redact(token: str) -> str:
    """The first 4 characters of a secret, as the broker logs it.

    Owner tokens prove ownership: whoever reads one in a log could release
    the lease of someone else. Four characters are enough to tell leases
    apart when debugging.
    """
    return token[:4] + "…"
