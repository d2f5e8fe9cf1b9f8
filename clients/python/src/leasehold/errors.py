"""Exceptions raised by the client.

Every exception raised for a failed call carries the gRPC status code and the
broker's message: the broker's messages name the rule or limit involved (who
holds the lock and for how long, which bound a TTL broke), which is what a
person reading a log needs.
"""

from __future__ import annotations

import enum
from typing import Optional

import grpc


class LossReason(enum.Enum):
    """Why a lease was lost (mirrors the Rust client's ``LossReason``)."""

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


class LeaseholdError(Exception):
    """Base class of the client's errors.

    ``code`` is the gRPC status code (``None`` for errors detected locally)
    and ``details`` the broker's message.
    """

    def __init__(self, message: str, code: Optional[grpc.StatusCode] = None, details: str = ""):
        super().__init__(message)
        self.code = code
        self.details = details


class NotAcquired(LeaseholdError):
    """The lock is held by someone else and the wait (if any) ran out.

    The broker answered ABORTED; its message names the current holder label
    and the time left on its lease (or the lock-delay still running).
    """


class LeaseLost(LeaseholdError):
    """The lease is gone: stop acting on it, acquire again if needed.

    ``reason`` is a :class:`LossReason`. Raised by ``Lease.check()`` and by
    ``Lease.release()`` when the lease was lost before it was released: then
    the lease ran out while you held it, and writes made near the end may
    have raced with the next holder (which is what fences are for).
    """

    def __init__(self, reason: LossReason, message: str = "", code: Optional[grpc.StatusCode] = None):
        text = f"the lease was lost: {reason}"
        if message:
            text += f" ({message})"
        super().__init__(text, code, message)
        self.reason = reason


def from_rpc_error(error: grpc.RpcError) -> LeaseholdError:
    """Turns a failed call into the matching exception."""
    code = error.code() if hasattr(error, "code") else None
    details = (error.details() if hasattr(error, "details") else "") or ""
    name = code.name if code is not None else "UNKNOWN"
    if code == grpc.StatusCode.ABORTED:
        return NotAcquired(details or "the lock is held", code, details)
    return LeaseholdError(f"{name}: {details}", code, details)


def redact(token: str) -> str:
    """The first 4 characters of a secret, as the broker logs it.

    Owner tokens prove ownership: whoever reads one in a log could release
    the lease of someone else. Four characters are enough to tell leases
    apart when debugging.
    """
    return token[:4] + "…"
