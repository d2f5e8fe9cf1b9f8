"""The broker replicas a Client talks to: one channel each, one current.

Calls go to the current replica and move on to the next only when it cannot
be reached: gRPC failed the call with UNAVAILABLE because no connection could
be made, so the request never left this process and sending it elsewhere
cannot apply it twice (as the Rust client's ``connect_any``). Any other
failure, the broker's own UNAVAILABLE included, is the caller's to see; the
one exception is a waiting Acquire or Campaign that its broker's graceful
shutdown ended (:func:`shutting_down`): the chain of calls of that wait
(``_core.Chain``) goes on on the next replica, in the place in line the
broker kept for it.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, List, Optional, Sequence, Tuple

import grpc

from ._wire import Stub
from .errors import LeaseholdError, detail_of

log = logging.getLogger("leasehold")

# What gRPC core says when a call failed before anything was sent: no
# address could be connected to (refused, TLS handshake failed, the
# connection attempt timed out), or the name did not resolve (grpcio 1.63:
# "DNS resolution failed for ..."; 1.85: "errors resolving ..."). gRPC's
# own words, not a broker's: a broker's refusals are read from their
# details.
_NOT_CONNECTED = ("failed to connect to all addresses", "DNS resolution failed", "errors resolving")


def shutting_down(error: BaseException) -> bool:
    """Whether a broker answered the call UNAVAILABLE (reason UNAVAILABLE in
    its details): it is shutting down (a graceful shutdown, SIGTERM, ends
    waiting calls so: server/src/lease/mod.rs, Leases::begin_shutdown), or
    its store did not answer. Either way another replica can serve the call
    (the proto's "Errors": safe to retry, on any replica). gRPC's own
    UNAVAILABLE (no connection) has no reason: see :func:`not_connected`."""
    code = error.code() if hasattr(error, "code") else None
    if code != grpc.StatusCode.UNAVAILABLE:
        return False
    return detail_of(error).reason == "UNAVAILABLE"


def not_connected(error: BaseException) -> bool:
    """Whether a call failed because no connection to the broker could be
    made (so the request was never sent)."""
    code = error.code() if hasattr(error, "code") else None
    details = (error.details() if hasattr(error, "details") else "") or ""
    return _not_connected(code, details)


def _not_connected(code, details: str) -> bool:
    return code == grpc.StatusCode.UNAVAILABLE and any(text in details for text in _NOT_CONNECTED)


def connection_failure(code, details: str) -> Optional[str]:
    """The message of a call that could not connect, for people, or None
    for any other failure. gRPC core's text repeats itself and puts a code
    name and the address family in front of the cause ("failed to connect
    to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: Failed to
    connect to remote host: Connection refused"): the cause alone is kept
    ("could not connect to the broker: Connection refused"); ``details``
    keeps all of it."""
    if not _not_connected(code, details):
        return None
    if "last error: " not in details:
        # Name resolution: its last words say why.
        cause = details.rsplit(": ", 1)[-1].strip(" []")
        return f"could not connect to the broker: {cause}" if cause else "could not connect to the broker"
    cause = details.split("last error: ", 1)[1]
    head, _, rest = cause.partition(": ")
    if rest and head.isupper() and " " not in head:  # a code's name: UNKNOWN, UNAVAILABLE
        cause = rest
    where = ""
    for family in ("ipv4:", "ipv6:", "unix:"):
        if cause.startswith(family) and ": " in cause:
            where, cause = cause[len(family) :].split(": ", 1)
    for said in ("Failed to connect to remote host: ", "failed to connect to remote host: "):
        if cause.startswith(said):
            cause = cause[len(said) :]
    at = f" at {where}" if where else ""
    return f"could not connect to the broker{at}: {cause.strip()}"


class Brokers:
    """One channel and stub per replica, in the order given, and the index
    of the one calls go to."""

    def __init__(self, targets: Sequence[str], channel: Callable[[str], grpc.Channel], metadata=()):
        self.targets: Tuple[str, ...] = tuple(targets)
        self._channels: List[grpc.Channel] = [channel(t) for t in self.targets]
        self._stubs = [Stub(c) for c in self._channels]
        # The bearer token's metadata, if any: sent with every call (never logged).
        self.metadata = metadata
        self._lock = threading.Lock()
        self._current = 0

    def __len__(self) -> int:
        return len(self._stubs)

    def current(self) -> Tuple[int, Stub]:
        """The replica calls go to now: its index (for :meth:`unreachable`)
        and its stub."""
        with self._lock:
            index = self._current
        return index, self._stubs[index]

    @property
    def target(self) -> str:
        return self.targets[self.current()[0]]

    def unreachable(self, index: int) -> None:
        """The replica at ``index`` could not be reached: move on to the next
        (unless another caller already did)."""
        self.move_on(index, "unreachable")

    def move_on(self, index: int, why: str) -> None:
        """Calls go to the replica after the one at ``index`` (unless another
        caller already moved on): it is ``why`` (unreachable, shutting
        down)."""
        if len(self._stubs) < 2:
            return
        with self._lock:
            if self._current != index:
                return
            self._current = (index + 1) % len(self._stubs)
            moved_to = self._current
        log.info("broker %s %s; moving to %s", self.targets[index], why, self.targets[moved_to])

    def call(self, method: str, request, timeout: float):
        """A unary call on the current replica, moving on to the next while
        replicas cannot be reached (each is tried once). Raises
        ``grpc.RpcError``."""
        attempts = len(self._stubs)
        while True:
            index, stub = self.current()
            try:
                return getattr(stub, method)(request, timeout=timeout, metadata=self.metadata)
            except grpc.RpcError as e:
                if attempts > 1 and not_connected(e):
                    self.unreachable(index)
                    attempts -= 1
                    continue
                raise

    def open_stream(self, method: str, request, timeout: float):
        """A server-streaming call whose first response has arrived, on the
        first replica that can be reached: returns ``(call, first)``. Reading
        the first response is what tells whether the call could be sent; it
        must come within ``timeout`` (the stream itself has no deadline).
        Raises ``grpc.RpcError``, :class:`LeaseholdError` (DEADLINE_EXCEEDED)
        when the first response is late, ``StopIteration`` if the stream
        ended at once."""
        attempts = len(self._stubs)
        while True:
            index, stub = self.current()
            call = getattr(stub, method)(request, metadata=self.metadata)
            late = threading.Event()

            def give_up(call=call, late=late) -> None:
                late.set()
                call.cancel()

            timer = threading.Timer(timeout, give_up)
            timer.daemon = True
            timer.start()
            try:
                return call, next(call)
            except grpc.RpcError as e:
                if late.is_set():
                    raise LeaseholdError(
                        f"DEADLINE_EXCEEDED: no answer to {method} within {timeout:g} s",
                        grpc.StatusCode.DEADLINE_EXCEEDED,
                    ) from None
                if attempts > 1 and not_connected(e):
                    self.unreachable(index)
                    attempts -= 1
                    continue
                raise
            finally:
                timer.cancel()

    def close(self) -> None:
        for channel in self._channels:
            channel.close()
