"""The broker replicas a Client talks to: one channel each, one current.

Calls go to the current replica and move on to the next only when it cannot
be reached: gRPC failed the call with UNAVAILABLE because no connection could
be made, so the request never left this process and sending it elsewhere
cannot apply it twice (as the Rust client's ``connect_any``). Any other
failure, the broker's own UNAVAILABLE included, is the caller's to see.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, List, Sequence, Tuple

import grpc

from ._proto import leasehold_pb2_grpc as pb_grpc
from .errors import LeaseholdError

log = logging.getLogger("leasehold")

# What gRPC core says when a call failed before anything was sent: no
# address could be connected to (refused, TLS handshake failed, the
# connection attempt timed out), or the name did not resolve.
_NOT_CONNECTED = ("failed to connect to all addresses", "DNS resolution failed")


def not_connected(error: BaseException) -> bool:
    """Whether a call failed because no connection to the broker could be
    made (so the request was never sent)."""
    code = error.code() if hasattr(error, "code") else None
    if code != grpc.StatusCode.UNAVAILABLE:
        return False
    details = (error.details() if hasattr(error, "details") else "") or ""
    return any(text in details for text in _NOT_CONNECTED)


class Brokers:
    """One channel and stub per replica, in the order given, and the index
    of the one calls go to."""

    def __init__(self, targets: Sequence[str], channel: Callable[[str], grpc.Channel], metadata=()):
        self.targets: Tuple[str, ...] = tuple(targets)
        self._channels: List[grpc.Channel] = [channel(t) for t in self.targets]
        self._stubs = [pb_grpc.LeaseholdServiceStub(c) for c in self._channels]
        # The bearer token's metadata, if any: sent with every call (never logged).
        self.metadata = metadata
        self._lock = threading.Lock()
        self._current = 0

    def __len__(self) -> int:
        return len(self._stubs)

    def current(self) -> Tuple[int, pb_grpc.LeaseholdServiceStub]:
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
        if len(self._stubs) < 2:
            return
        with self._lock:
            if self._current != index:
                return
            self._current = (index + 1) % len(self._stubs)
            moved_to = self._current
        log.info("broker %s unreachable; moving to %s", self.targets[index], self.targets[moved_to])

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
