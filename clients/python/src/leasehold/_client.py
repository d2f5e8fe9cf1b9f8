"""The Client: unary calls, and leases kept alive by its keeper thread."""

from __future__ import annotations

import dataclasses
import datetime
import os
import socket
import time
from typing import Optional, Sequence, Tuple, Union

import grpc

from ._keeper import Keeper
from ._lease import Lease, _Held
from ._proto import leasehold_pb2 as pb
from ._proto import leasehold_pb2_grpc as pb_grpc
from .errors import LeaseholdError, LeaseLost, LossReason, from_rpc_error

Seconds = Union[float, int, datetime.timedelta]

# gRPC's default reconnect backoff starts at 1 s and grows to 2 minutes: far
# too slow to resume a lease of a few seconds after a broker restart or a
# network blip. HTTP/2 pings notice a dead connection that TCP alone would
# not (same settings as the Rust client).
_CHANNEL_OPTIONS: Sequence[Tuple[str, int]] = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2000),
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
)


def _seconds(value: Seconds, what: str) -> float:
    if isinstance(value, datetime.timedelta):
        value = value.total_seconds()
    value = float(value)
    if value < 0:
        raise ValueError(f"{what} must not be negative, got {value}")
    return value


def _ms(seconds: float) -> int:
    return int(round(seconds * 1000))


def default_holder() -> str:
    """``hostname:pid``, so that an operator can find the holder."""
    return f"{socket.gethostname() or 'unknown'}:{os.getpid()}"


@dataclasses.dataclass(frozen=True)
class Description:
    """Who holds a name, as Describe reports it (never the owner token).
    Durations are in seconds."""

    held: bool
    holder: str
    fence: int
    remaining: float
    ttl: float
    granted_at_unix: float
    waiters: int
    local_waiters: int
    lock_delay: float
    lock_delay_remaining: float
    permits_held: int


@dataclasses.dataclass(frozen=True)
class FenceCheck:
    """The answer of CheckFence; true in a boolean context when the fence is
    the current lease's."""

    current: bool
    current_fence: int

    def __bool__(self) -> bool:
        return self.current


@dataclasses.dataclass(frozen=True)
class Leader:
    """An election's leader: its value and its term (its lease's fence)."""

    value: str
    term: int
    remaining: float


class Client:
    """A connection to a Leasehold broker.

    ``target`` is ``host:port`` (``http://`` and ``https://`` prefixes are
    accepted; ``https`` uses TLS with the system roots unless ``credentials``
    are given). Unary calls time out after ``timeout`` seconds (plus the
    requested wait, for acquire).

    One background thread keeps every lease of the client alive over one
    KeepAlive stream. Close the client (or use it as a context manager) to
    release its leases and stop that thread.
    """

    def __init__(
        self,
        target: str,
        *,
        timeout: float = 10.0,
        credentials: Optional[grpc.ChannelCredentials] = None,
        options: Sequence[Tuple[str, object]] = (),
    ):
        secure = credentials is not None
        if target.startswith("https://"):
            target, secure = target[len("https://") :], True
        elif target.startswith("http://"):
            target = target[len("http://") :]
        target = target.rstrip("/")
        opts = list(_CHANNEL_OPTIONS) + list(options)
        if secure:
            self._channel = grpc.secure_channel(target, credentials or grpc.ssl_channel_credentials(), opts)
        else:
            self._channel = grpc.insecure_channel(target, opts)
        self.target = target
        self._timeout = timeout
        self._stub = pb_grpc.LeaseholdStub(self._channel)
        self._keeper = Keeper(self._stub)
        self._closed = False

    # -- leases --------------------------------------------------------------

    def acquire(
        self,
        name: str,
        ttl: Seconds,
        wait: Seconds = 0,
        holder: Optional[str] = None,
        *,
        margin: Optional[Seconds] = None,
        lock_delay: Seconds = 0,
        limit: int = 0,
    ) -> Lease:
        """Takes the lease on ``name`` for ``ttl`` seconds, renewed in the
        background until released or lost.

        ``wait``: how long to wait if the lock is held (0: try once; a try
        never jumps the queue of waiting callers). ``holder``: the label
        Describe shows (default ``hostname:pid``). ``margin``: how long before
        the computed deadline the lease counts as lost, time for the
        application to stop writing (default: a tenth of the TTL).
        ``lock_delay``: if this lease ends involuntarily, nobody gets the
        lock for that long afterwards. ``limit`` > 1 makes ``name`` a
        semaphore.

        Raises :class:`NotAcquired` if the lock is held and the wait ran out,
        :class:`LeaseholdError` for other refusals (e.g. INVALID_ARGUMENT for
        a TTL outside the broker's bounds).
        """
        self._check_open()
        ttl_s = _seconds(ttl, "ttl")
        wait_s = _seconds(wait, "wait")
        request = pb.AcquireRequest(
            name=name,
            ttl_ms=_ms(ttl_s),
            holder=default_holder() if holder is None else holder,
            wait_timeout_ms=_ms(wait_s),
            lock_delay_ms=_ms(_seconds(lock_delay, "lock_delay")),
            limit=limit,
        )
        # The deadline counts from the time the request was *sent*.
        sent = time.monotonic()
        try:
            response = self._stub.Acquire(request, timeout=wait_s + self._timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None
        return self._hold(response.lease, response.waited_ms, sent, margin)

    def campaign(self, election: str, value: str, ttl: Seconds, wait: Seconds = 0) -> Lease:
        """Becomes the leader of ``election`` with ``value`` (waiting up to
        ``wait``). The lease returned is the leadership: its fence is the
        leader's term, attach it to what the leader writes; release it to
        resign. Raises :class:`NotAcquired` if another leader remains."""
        self._check_open()
        wait_s = _seconds(wait, "wait")
        request = pb.CampaignRequest(
            election=election, value=value, ttl_ms=_ms(_seconds(ttl, "ttl")), wait_timeout_ms=_ms(wait_s)
        )
        sent = time.monotonic()
        try:
            response = self._stub.Campaign(request, timeout=wait_s + self._timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None
        return self._hold(response.lease, response.waited_ms, sent, None)

    def _hold(self, lease: pb.Lease, waited_ms: int, sent: float, margin: Optional[Seconds]) -> Lease:
        ttl = lease.ttl_ms / 1000.0
        margin_s = ttl / 10.0 if margin is None else min(_seconds(margin, "margin"), ttl)
        # The grant happened no sooner than waited_ms after we sent, and the
        # store counts the TTL from then.
        deadline = sent + waited_ms / 1000.0 + ttl - margin_s
        held = _Held(lease.name, lease.owner_token, lease.fence, ttl, margin_s, deadline)
        self._keeper.add(held)
        return Lease(held, self, waited_ms / 1000.0)

    def _release_held(self, held: _Held, timeout: Optional[float] = None) -> None:
        held.released = True
        self._keeper.forget(held)
        reason = held.loss()
        if reason is not None and reason is not LossReason.DEADLINE_PASSED:
            # The broker said it is gone: nothing to release.
            raise LeaseLost(reason, held.message)
        if reason is LossReason.DEADLINE_PASSED:
            # It may still exist on the broker: free it for the next holder.
            self._keeper.release_in_background(held.name, held.token)
            raise LeaseLost(reason, "no renewal was confirmed before the local deadline")
        self.release_token(held.name, held.token, timeout=timeout)

    def release_token(self, name: str, owner_token: str, *, timeout: Optional[float] = None) -> None:
        """Releases a lease known only by its name and owner token (e.g. taken
        by another process). Raises :class:`LeaseLost` if it is already gone."""
        self._check_open()
        try:
            self._stub.Release(
                pb.ReleaseRequest(name=name, owner_token=owner_token),
                timeout=self._timeout if timeout is None else timeout,
            )
        except grpc.RpcError as e:
            code = e.code()
            if code == grpc.StatusCode.NOT_FOUND:
                raise LeaseLost(LossReason.EXPIRED, e.details() or "", code) from None
            if code == grpc.StatusCode.FAILED_PRECONDITION:
                raise LeaseLost(LossReason.NOT_OWNER, e.details() or "", code) from None
            raise from_rpc_error(e) from None

    # -- questions -----------------------------------------------------------

    def describe(self, name: str) -> Description:
        """Who holds ``name``: ``held`` is False for a free name."""
        r = self._unary(self._stub.Describe, pb.DescribeRequest(name=name))
        return Description(
            held=r.held,
            holder=r.holder,
            fence=r.fence,
            remaining=r.remaining_ms / 1000.0,
            ttl=r.ttl_ms / 1000.0,
            granted_at_unix=r.granted_at_unix_ms / 1000.0,
            waiters=r.waiters,
            local_waiters=r.local_waiters,
            lock_delay=r.lock_delay_ms / 1000.0,
            lock_delay_remaining=r.lock_delay_remaining_ms / 1000.0,
            permits_held=r.permits_held,
        )

    def check_fence(self, name: str, fence: int) -> FenceCheck:
        """Whether ``fence`` is the fence of the current lease on ``name``,
        for a resource that cannot remember the highest fence it has seen.
        The answer can be stale by the time it arrives: a resource that keeps
        the highest fence itself is safer."""
        r = self._unary(self._stub.CheckFence, pb.CheckFenceRequest(name=name, fence=fence))
        return FenceCheck(current=r.current, current_fence=r.current_fence)

    def leader(self, election: str) -> Optional[Leader]:
        """The current leader of ``election``, or None."""
        r = self._unary(self._stub.Leader, pb.LeaderRequest(election=election))
        if not r.present:
            return None
        return Leader(value=r.value, term=r.term, remaining=r.remaining_ms / 1000.0)

    def _unary(self, method, request):
        self._check_open()
        try:
            return method(request, timeout=self._timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    # -- lifetime ------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise LeaseholdError("the client is closed")

    def close(self) -> None:
        """Releases the leases still held (best effort), stops the keeper
        thread and closes the channel."""
        if self._closed:
            return
        for held in self._keeper.snapshot():
            try:
                # Short: a broker that is down must not hold up the close
                # (the leases then expire at their TTL).
                self._release_held(held, timeout=2.0)
            except Exception:
                pass
        self._closed = True
        self._keeper.close()
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client(target={self.target!r})"
