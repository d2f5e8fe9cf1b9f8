"""What the synchronous Client and the asyncio AsyncClient share: option
checks, channel settings, the acquire request and the deadline of a grant,
the mapping of broker answers to results and errors, and the plan of a long
wait. Nothing here does I/O, so both clients follow one set of rules."""

from __future__ import annotations

import dataclasses
import datetime
import os
import socket
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import grpc

from ._advice import AUTO
from ._lease import DEADLINE_MESSAGE, _Held
from ._proto import leasehold_pb2 as pb
from .errors import LeaseholdError, LeaseLost, LossReason, detail_of, from_rpc_error

Seconds = Union[float, int, datetime.timedelta]
#: A PEM file (a path) or PEM text itself (bytes).
Pem = Union[str, "os.PathLike[str]", bytes]

# gRPC's default reconnect backoff starts at 1 s and grows to 2 minutes: far
# too slow to resume a lease of a few seconds after a broker restart or a
# network blip. gRPC core takes grpc.min_reconnect_backoff_ms as the least
# time a connection attempt is given (TCP, TLS and HTTP/2 handshakes), not as
# a backoff: 5 s, the Rust client's connect timeout. (At 100 ms, a broker a
# few tens of milliseconds away over TLS failed its first calls with
# UNAVAILABLE, and with several brokers it counted as unreachable.) HTTP/2
# pings notice a dead connection that TCP alone would not (same settings as
# the Rust client).
_CHANNEL_OPTIONS: Sequence[Tuple[str, int]] = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 5_000),
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


def _pem(value: Pem, what: str) -> bytes:
    """PEM bytes as given, or read from the file named by a path."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    try:
        with open(value, "rb") as f:
            return f.read()
    except OSError as e:
        # The path only: never the file's contents (it may be a key).
        raise LeaseholdError(f"cannot read {what} {os.fspath(value)!r}: {e.strerror}") from None


def _bearer_metadata(token: Optional[str]) -> Tuple[Tuple[str, str], ...]:
    """The ``authorization`` metadata every call carries, or none.

    Checked here so that a bad token fails at once, with a message that does
    not contain it (gRPC's own complaint about an invalid metadata value
    might)."""
    if token is None:
        return ()
    if not isinstance(token, str):
        raise TypeError("token must be a str")
    # RFC 6750's b64token is narrower; visible ASCII is what a header value
    # without folding can carry, and what gRPC accepts.
    if not token or any(not ("!" <= c <= "~") for c in token):
        raise ValueError("token must be non-empty visible ASCII without spaces (the token itself is not shown)")
    return (("authorization", f"Bearer {token}"),)


def _split_targets(target: Union[str, Sequence[str]]) -> Tuple[Optional[str], List[str]]:
    """The scheme (``"http"``, ``"https"`` or None) and the addresses of one
    target, a comma-separated list of them, or a sequence of them."""
    if isinstance(target, str):
        targets = target.split(",")
    else:
        targets = list(target)
        if not all(isinstance(t, str) for t in targets):
            raise TypeError("target must be a str or a sequence of str")
    schemes = set()
    addresses = []
    for t in targets:
        t = t.strip()
        if not t:
            continue
        scheme = None
        for prefix in ("https://", "http://"):
            if t.startswith(prefix):
                scheme, t = prefix[:-3], t[len(prefix) :]
        schemes.add(scheme)
        addresses.append(t.rstrip("/"))
    if not addresses:
        raise ValueError("no broker address given")
    if {"http", "https"} <= schemes:
        raise ValueError("the broker addresses mix http:// and https://: one client is either TLS or plaintext")
    scheme = "https" if "https" in schemes else ("http" if "http" in schemes else None)
    return scheme, addresses


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

    @staticmethod
    def _from(r) -> Optional["Leader"]:
        if not r.present:
            return None
        return Leader(value=r.value, term=r.term, remaining=r.remaining_ms / 1000.0)


@dataclasses.dataclass(frozen=True)
class Listed:
    """A name a listing found something on (a lease, permits, waiters, a
    lock-delay): its state as :class:`Description` tells it, with the
    tenant it belongs to. Durations are in seconds."""

    #: The tenant whose name it is (``@root`` for the root namespace).
    tenant: str
    #: The name, as its holders name it (without the tenant).
    name: str
    #: Whether a lock lease holds it (False for a semaphore's permits).
    held: bool
    #: The holder's label (an election's leader's value).
    holder: str
    #: The lease's fence (an election's term).
    fence: int
    #: Time left on the lease unless renewed.
    remaining: float
    #: The TTL the lease was granted or last renewed with.
    ttl: float
    #: When the lease was granted, in seconds since the Unix epoch (the
    #: store's clock).
    granted_at_unix: float
    #: Callers waiting in line, on every broker replica.
    waiters: int
    #: Semaphore permits held now (0 for a lock).
    permits_held: int
    #: When not held: time left of a lock-delay in force now.
    lock_delay_remaining: float


@dataclasses.dataclass(frozen=True)
class ListPage:
    """One page of a listing (:meth:`Client.list_page`): the names of the
    page with something on them, and the token of the next page ("" when
    the walk is done). A page may hold fewer entries than its size, even
    none, while ``next_page_token`` says there is more."""

    locks: List[Listed]
    next_page_token: str


def list_request(prefix: str, tenant: str, page_size: int, page_token: str) -> pb.ListRequest:
    """The ListRequest of a page (the broker judges the page size: 0 for its
    default, at most 1000)."""
    if isinstance(page_size, bool) or not isinstance(page_size, int):
        raise TypeError("page_size must be an int")
    if not 0 <= page_size < 2**32:
        raise ValueError(f"page_size must be a 32-bit count, 0 for the broker's default (it takes at most 1000), got {page_size}")
    return pb.ListRequest(prefix=prefix, tenant=tenant, page_size=page_size, page_token=page_token)


def list_page(r) -> ListPage:
    """A ListResponse as a :class:`ListPage`."""
    return ListPage(
        locks=[
            Listed(
                tenant=l.tenant,
                name=l.name,
                held=l.held,
                holder=l.holder,
                fence=l.fence,
                remaining=l.remaining_ms / 1000.0,
                ttl=l.ttl_ms / 1000.0,
                granted_at_unix=l.granted_at_unix_ms / 1000.0,
                waiters=l.waiters,
                permits_held=l.permits_held,
                lock_delay_remaining=l.lock_delay_remaining_ms / 1000.0,
            )
            for l in r.locks
        ],
        next_page_token=r.next_page_token,
    )


def description(r) -> Description:
    """A DescribeResponse as a :class:`Description`."""
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


@dataclasses.dataclass(frozen=True)
class ChannelSettings:
    """How to open a channel to each target: TLS credentials (None for
    plaintext), channel options, and the metadata every call carries."""

    targets: List[str]
    credentials: Optional[grpc.ChannelCredentials]
    options: List[Tuple[str, Any]]
    metadata: Tuple[Tuple[str, str], ...]

    @property
    def tls(self) -> bool:
        return self.credentials is not None


def channel_settings(
    target: Union[str, Sequence[str]],
    *,
    tls: Union[bool, Pem, None],
    client_cert: Optional[Pem],
    client_key: Optional[Pem],
    server_name: Optional[str],
    token: Optional[str],
    credentials: Optional[grpc.ChannelCredentials],
    options: Sequence[Tuple[str, object]],
) -> ChannelSettings:
    """Checks a client's connection options (see :class:`Client`)."""
    scheme, targets = _split_targets(target)
    if (client_cert is None) != (client_key is None):
        raise ValueError("client_cert and client_key go together (mutual TLS needs both)")
    if credentials is not None and (tls not in (None, True) or client_cert is not None):
        raise ValueError("give either credentials or tls/client_cert/client_key, not both")
    wants_tls = (
        credentials is not None
        or client_cert is not None
        or (tls is not None and tls is not False)
        or scheme == "https"
    )
    if tls is False and wants_tls:
        raise ValueError("tls=False contradicts an https:// target, a client certificate or credentials")
    if scheme == "http" and wants_tls:
        raise ValueError("an http:// target is plaintext: use https:// (or no scheme) with TLS options")
    metadata = _bearer_metadata(token)

    opts: List[Tuple[str, Any]] = list(_CHANNEL_OPTIONS)
    if server_name is not None:
        opts.append(("grpc.ssl_target_name_override", server_name))
    opts += list(options)
    if wants_tls and credentials is None:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=None if tls in (None, True) else _pem(tls, "CA file"),
            private_key=None if client_key is None else _pem(client_key, "client key"),
            certificate_chain=None if client_cert is None else _pem(client_cert, "client certificate"),
        )
    return ChannelSettings(targets, credentials if wants_tls else None, opts, metadata)


# -- acquiring ---------------------------------------------------------------


def acquire_request(
    name: str,
    ttl: Seconds,
    wait: Optional[Seconds],
    holder: Optional[str],
    lock_delay: Seconds,
    limit: int,
) -> Tuple[pb.AcquireRequest, Optional[float]]:
    """The AcquireRequest (its wait left for :class:`WaitPlan` to fill in)
    and the wait in seconds (None: as long as it takes). ``ttl="auto"``
    lets the broker choose (``ttl_auto``, ``ttl_ms`` 0)."""
    auto = is_auto(ttl)
    ttl_ms = 0 if auto else _ms(_seconds(ttl, "ttl"))
    wait_s = None if wait is None else _seconds(wait, "wait")
    request = pb.AcquireRequest(
        name=name,
        ttl_ms=ttl_ms,
        ttl_auto=auto,
        holder=default_holder() if holder is None else holder,
        lock_delay_ms=_ms(_seconds(lock_delay, "lock_delay")),
        limit=limit,
    )
    return request, wait_s


def is_auto(ttl: Any) -> bool:
    """Whether ``ttl`` asks the broker to choose (``"auto"``); any other
    string is a mistake, said in the caller's words."""
    if isinstance(ttl, str):
        if ttl == AUTO:
            return True
        raise ValueError(f'ttl must be a number of seconds, a timedelta or "auto", got {ttl!r}')
    return False


def held_from(lease, waited_ms: int, sent: float, margin: Optional[Seconds], auto: bool = False) -> _Held:
    """The state of a granted lease, its local deadline counted from the
    time the Acquire that got it was *sent*: the grant happened no sooner
    than ``waited_ms`` after that, and the store counts the TTL from then;
    less the margin (default: a tenth of the TTL). ``auto``: taken with
    ``ttl="auto"`` (the lease's TTL is the broker's choice, and follows its
    suggestion at each renewal)."""
    ttl = lease.ttl_ms / 1000.0
    margin_s = ttl / 10.0 if margin is None else min(_seconds(margin, "margin"), ttl)
    deadline = sent + waited_ms / 1000.0 + ttl - margin_s
    return _Held(
        lease.name, lease.owner_token, lease.fence, ttl, margin_s, deadline,
        auto=auto, margin_follows_ttl=margin is None,
    )


def release_error(error: grpc.RpcError, given: Optional[Mapping[str, Any]] = None) -> LeaseholdError:
    """A failed Release as the exception to raise: LeaseLost when the lease
    was already gone (REVOKED when the broker says an operator revoked it:
    NOT_FOUND, LEASE_REVOKED; EXPIRED for any other NOT_FOUND; NOT_OWNER for
    FAILED_PRECONDITION)."""
    code = error.code()
    if code in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION):
        detail = detail_of(error)
        if code == grpc.StatusCode.FAILED_PRECONDITION:
            reason = LossReason.NOT_OWNER
        elif detail.reason == "LEASE_REVOKED":
            reason = LossReason.REVOKED
        else:
            reason = LossReason.EXPIRED
        return LeaseLost(reason, error.details() or "", code, detail.metadata)
    return from_rpc_error(error, given)


def released_loss(held: _Held) -> Optional[LeaseLost]:
    """Marks ``held`` released. Returns the LeaseLost to raise if it was lost
    before (then there is nothing to release, unless only its local deadline
    passed: the caller frees it in the background), None if the caller must
    send a Release."""
    held.released = True
    reason = held.loss()
    if reason is None:
        return None
    if reason is LossReason.DEADLINE_PASSED:
        return LeaseLost(reason, DEADLINE_MESSAGE)
    return LeaseLost(reason, held.message)


# -- long waits --------------------------------------------------------------

#: The broker's default --max-wait: the longest wait one Acquire call may ask
#: for until the broker says otherwise.
DEFAULT_MAX_WAIT = 300.0

#: The trailing metadata of an ABORTED Acquire or Campaign that kept its
#: place in line (keep_place): the place, to pass back as ``place``.
PLACE_METADATA = "leasehold-place"


def place_from(error: grpc.RpcError) -> str:
    """The place an ABORTED call kept in line (its ``leasehold-place``
    trailing metadata), or "" if it kept none (no keep_place, or a broker
    from before keep_place)."""
    try:
        metadata = error.trailing_metadata()
    except Exception:  # an error that is no call (e.g. raised locally)
        return ""
    for key, value in metadata or ():
        if key == PLACE_METADATA:
            return value.decode("ascii") if isinstance(value, bytes) else value
    return ""


def max_wait_from(error: grpc.RpcError) -> Optional[float]:
    """The broker's --max-wait, in seconds, from its refusal of a longer
    wait: INVALID_ARGUMENT whose details (ErrorInfo, or the Session
    stream's SessionError) say BAD_ARGUMENT, ``argument`` ``wait``, with
    ``max_wait_ms``. None for any other error (a broker from before error
    details included: its refusal then reaches the caller)."""
    if error.code() != grpc.StatusCode.INVALID_ARGUMENT:
        return None
    detail = detail_of(error)
    if detail.reason != "BAD_ARGUMENT" or detail.metadata.get("argument") != "wait":
        return None
    max_wait_ms = detail.metadata.get("max_wait_ms", "")
    if not max_wait_ms.isdigit():
        return None
    return int(max_wait_ms) / 1000.0


class WaitPlan:
    """The Acquire calls of one acquire, each within the broker's
    --max-wait.

    A wait longer than --max-wait (or without end: ``wait=None``) is a chain
    of waiting calls, one after the other. Each but the last asks the broker
    to keep its place in line when its wait runs out (``keep_place``): the
    ABORTED answer then carries the place (:func:`place_from`), which the
    broker keeps for 3 s, and the next call, sent at once, waits in it
    (``place``), in the same position. So callers that arrived later, with
    any kind of wait, stay behind. The last call of a finite wait keeps
    nothing: its caller gives up."""

    def __init__(self, wait: Optional[float], max_wait: float):
        self.start = time.monotonic()
        self.end = None if wait is None else self.start + wait
        self.max_wait = max_wait

    def segment(self, now: float) -> float:
        """How long the call sent now waits."""
        left = float("inf") if self.end is None else max(0.0, self.end - now)
        return min(left, self.max_wait)

    def reaches_end(self, now: float, segment: float) -> bool:
        """Whether a call sent at ``now`` waiting ``segment`` is the last."""
        return self.end is not None and now + segment >= self.end

    def over(self, now: float) -> bool:
        return self.end is not None and now >= self.end

    def learnt(self, max_wait: float) -> bool:
        """The broker refused a segment and said its --max-wait: True if
        the plan can go on with shorter segments."""
        if max_wait <= 0.0 or max_wait >= self.max_wait:
            return False
        self.max_wait = max_wait
        return True


def with_wait(request, segment: float, keep_place: bool, place: str):
    """A copy of an AcquireRequest or CampaignRequest waiting ``segment``,
    keeping its place in line when that runs out (``keep_place``), and
    waiting in ``place`` (a place an earlier call kept; "" for none)."""
    r = type(request)()
    r.CopyFrom(request)
    r.wait_timeout_ms = _ms(segment)
    r.keep_place = keep_place
    r.place = place
    return r


@dataclasses.dataclass
class ChainCall:
    """One Acquire call of a chain: the client's handle on it (a gRPC future
    or an asyncio task), when it was sent and to which replica, and how long
    it waits."""

    handle: Any
    sent: float
    segment: float
    index: int


#: A chain's call answered "shutting down" later than this after it was
#: sent had been waiting on that broker (it was served until the shutdown),
#: not turned away on arrival by a broker already going: the broker it moves
#: to starts a new round of replicas (see :meth:`Chain.failed`). A broker
#: that is shutting down answers a new call at once (its attempt, then the
#: shutdown it already knows of); a second is far above that, and far below
#: a wait worth keeping.
_SERVED_FOR = 1.0


class Chain:
    """The decisions of one acquire or campaign (see :class:`WaitPlan`): when to send a
    call, what to make of each failed one. Both clients drive it, each with
    its own I/O; it is not thread-safe (one driver at a time).

    A broker's graceful shutdown (SIGTERM: a rolling restart) ends the
    call waiting on it with UNAVAILABLE "shutting down", and, the call having
    asked to keep its place, keeps the place for it (``leasehold-place``, as
    for a wait that ran out). The chain treats that as a wait that ran out:
    the next call, sent at once, waits in that place, on the next replica.
    The last call of a finite wait keeps no place (see :class:`WaitPlan`):
    its next call joins the line at the back, within the caller's deadline.
    A place that lapsed meanwhile (3 s) is no error either: the call joins at
    the back and waits on. Moving on stops when a whole round of replicas,
    one after the other, could not be reached or was shutting down: then no
    broker can serve the wait, and the caller gets the last error
    (UNAVAILABLE), as for any call that reaches no broker."""

    def __init__(
        self,
        method: str,
        request,
        wait: Optional[float],
        max_wait: float,
        replicas: int,
        given: Optional[Mapping[str, Any]] = None,
    ):
        #: "Acquire" or "Campaign": both wait in a line, and answer a lease
        #: and waited_ms.
        self.method = method
        self._request = request
        # The caller's arguments (by the broker's names), for the message
        # of a refusal of one.
        self._given: Dict[str, Any] = dict(given or {})
        self.plan = WaitPlan(wait, max_wait)
        #: The call in flight, if any (a list: the drivers iterate over it).
        self.calls: List[ChainCall] = []
        self._replicas = replicas
        # Replicas in a row that could not serve the wait (unreachable, or
        # shutting down as the call arrived); a round of them ends it.
        self._unserved = 0
        # The place the last call kept in line ("" before one did). Kept
        # across a failed call too: sent again (to another replica, say)
        # within the broker's 3 s, it still finds its position.
        self._place = ""

    def needs_call(self, now: float) -> bool:
        """Whether to send a call now: none is in flight."""
        return not self.calls

    def request(self, now: float) -> Tuple[Any, float]:
        """The request of the call to send now, and its wait (segment)."""
        segment = self.plan.segment(now)
        keep_place = not self.plan.reaches_end(now, segment)
        return with_wait(self._request, segment, keep_place, self._place), segment

    def sent(self, handle: Any, sent: float, segment: float, index: int) -> None:
        self.calls.append(ChainCall(handle, sent, segment, index))

    def retry(self, call: ChainCall) -> None:
        """The call was never served and is sent again at once, in the
        same place: the broker did not know the Session stream (the next
        call is a unary one), or refused it on the stream only (a stream
        holding --max-stream-leases leases)."""
        self.calls.remove(call)

    def failed(self, call: ChainCall, error: grpc.RpcError, move_on, now: float) -> Optional[LeaseholdError]:
        """The call of the chain failed (it is no longer in flight). Returns
        the error to raise, or None if the chain goes on: the driver sends
        the next call (see :meth:`needs_call`). ``move_on(index, why)``
        moves the client off a replica that could not be reached or is
        shutting down."""
        self.calls.remove(call)
        code = error.code()
        # Deferred import: _brokers imports the generated stubs' module.
        from ._brokers import not_connected, shutting_down

        if shutting_down(error):
            place = place_from(error)
            if place:
                self._place = place  # kept by the broker going away: wait there elsewhere
            if now - call.sent >= _SERVED_FOR:
                self._unserved = 0  # it was waiting there: a new round starts
            if self._unserved + 1 < self._replicas:
                self._unserved += 1
                move_on(call.index, "shutting down")
                return None
            return from_rpc_error(error, self._given)
        if code == grpc.StatusCode.ABORTED:
            if self.plan.over(now):
                return from_rpc_error(error, self._given)
            self._unserved = 0  # a broker served the whole call
            place = place_from(error)
            if place:
                self._place = place  # its wait ran out; the next call waits there
                return None
            if now >= call.sent + 0.9 * call.segment:
                # Its wait ran out without a place kept (a broker from before
                # keep_place): the next call joins at the back.
                return None
            return from_rpc_error(error, self._given)
        learnt = max_wait_from(error)
        if learnt is not None and self.plan.learnt(learnt):
            return None
        if not_connected(error) and self._unserved + 1 < self._replicas:
            self._unserved += 1
            move_on(call.index, "unreachable")
            return None
        return from_rpc_error(error, self._given)
