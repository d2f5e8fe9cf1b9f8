"""The Client: unary calls, and leases kept alive by its keeper thread."""

from __future__ import annotations

import dataclasses
import datetime
import os
import socket
import time
import weakref
from typing import Iterator, List, Optional, Sequence, Tuple, Union

import grpc

from ._brokers import Brokers
from ._keeper import Keeper
from ._lease import Lease, _Held
from ._proto import leasehold_pb2 as pb
from .errors import LeaseholdError, LeaseLost, LossReason, from_rpc_error

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
    def _from(r: Union[pb.LeaderResponse, pb.ObserveResponse]) -> Optional["Leader"]:
        if not r.present:
            return None
        return Leader(value=r.value, term=r.term, remaining=r.remaining_ms / 1000.0)


class Observation:
    """The leadership of an election as it is now, then every change, as the
    broker pushes them: iterate over it for ``Leader`` objects (``None``
    when the election has no leader). Returned by :meth:`Client.observe`.

    The iteration ends after :meth:`cancel` (or the end of a ``with``
    block). If the stream breaks (the broker shut down or died), the next
    step raises :class:`LeaseholdError` (UNAVAILABLE): observe again, which
    goes to another replica if this one cannot be reached."""

    def __init__(self, call, first: pb.ObserveResponse):
        self._call = call
        self._first: Optional[pb.ObserveResponse] = first
        self._cancelled = False

    def __iter__(self) -> Iterator[Optional[Leader]]:
        return self

    def __next__(self) -> Optional[Leader]:
        if self._cancelled:
            raise StopIteration
        if self._first is not None:
            r, self._first = self._first, None
            return Leader._from(r)
        try:
            r = next(self._call)
        except grpc.RpcError as e:
            if self._cancelled:
                raise StopIteration from None
            raise from_rpc_error(e) from None
        return Leader._from(r)

    def cancel(self) -> None:
        """Ends the stream (from any thread); the iteration stops."""
        self._cancelled = True
        self._call.cancel()

    close = cancel

    def __enter__(self) -> "Observation":
        return self

    def __exit__(self, *exc) -> None:
        self.cancel()


class Client:
    """A connection to a Leasehold broker, or to several replicas of one.

    ``target`` is ``host:port``; ``http://`` and ``https://`` prefixes are
    accepted, and ``https://`` means TLS (as the Rust CLI's ``--broker``).
    Unary calls time out after ``timeout`` seconds (plus the requested wait,
    for acquire).

    Several replicas (sharing one store): a list of targets, or one string
    of them separated by commas. Calls and the KeepAlive stream go to one
    replica and move on to the next only when it cannot be reached (the
    call failed to connect, so the request never left); the leases then
    resume there by owner token. Every target takes the same TLS settings
    and token.

    TLS and authentication (all optional):

    * ``tls``: ``True`` for TLS trusting the system's roots (gRPC's bundled
      roots, or the file named by ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH``); a
      path (``str`` or path-like) to a PEM file of CA certificates, or the
      PEM ``bytes`` themselves, for TLS trusting only those; ``False`` for
      plaintext. Default: TLS (system roots) for ``https://`` targets or when
      a client certificate is given, plaintext otherwise.
    * ``client_cert`` and ``client_key`` (together): this client's
      certificate chain and private key, each a path or PEM bytes, for a
      broker with mutual TLS (``--tls-client-ca``). They imply TLS.
    * ``server_name``: the name the broker's certificate must carry, when it
      is not the host of ``target`` (e.g. connecting by IP address to a
      certificate issued for a DNS name).
    * ``token``: a bearer token, sent as ``authorization: Bearer <token>``
      metadata on every call, the KeepAlive stream included, for a broker
      with ``--auth-file``. It is sent on plaintext channels too (e.g. to a
      broker on loopback); anywhere else, use it with TLS. It never appears
      in ``repr()``, logs or exception messages.
    * ``credentials``: ready-made ``grpc.ChannelCredentials`` instead of
      ``tls``/``client_cert``/``client_key`` (implies TLS).

    One background thread keeps every lease of the client alive over one
    KeepAlive stream. Close the client (or use it as a context manager) to
    release its leases and stop that thread.
    """

    def __init__(
        self,
        target: Union[str, Sequence[str]],
        *,
        timeout: float = 10.0,
        tls: Union[bool, Pem, None] = None,
        client_cert: Optional[Pem] = None,
        client_key: Optional[Pem] = None,
        server_name: Optional[str] = None,
        token: Optional[str] = None,
        credentials: Optional[grpc.ChannelCredentials] = None,
        options: Sequence[Tuple[str, object]] = (),
    ):
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

        opts = list(_CHANNEL_OPTIONS)
        if server_name is not None:
            opts.append(("grpc.ssl_target_name_override", server_name))
        opts += list(options)
        if wants_tls:
            if credentials is None:
                credentials = grpc.ssl_channel_credentials(
                    root_certificates=None if tls in (None, True) else _pem(tls, "CA file"),
                    private_key=None if client_key is None else _pem(client_key, "client key"),
                    certificate_chain=None if client_cert is None else _pem(client_cert, "client certificate"),
                )
            secure = credentials

            def channel(t: str) -> grpc.Channel:
                return grpc.secure_channel(t, secure, opts)

        else:

            def channel(t: str) -> grpc.Channel:
                return grpc.insecure_channel(t, opts)

        self._brokers = Brokers(targets, channel, metadata)
        #: The broker addresses given, in order.
        self.targets: Tuple[str, ...] = self._brokers.targets
        #: Whether the channels use TLS.
        self.tls = wants_tls
        self._timeout = timeout
        self._keeper = Keeper(self._brokers)
        # Open observations, cancelled by close() so that they end cleanly.
        self._observations: "weakref.WeakSet[Observation]" = weakref.WeakSet()
        self._closed = False

    @property
    def target(self) -> str:
        """The broker address calls go to now (with several, the one in use)."""
        return self._brokers.target

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
            response = self._brokers.call("Acquire", request, timeout=wait_s + self._timeout)
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
            response = self._brokers.call("Campaign", request, timeout=wait_s + self._timeout)
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
            self._brokers.call(
                "Release",
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

    def describe(self, name: str, tenant: str = "") -> Description:
        """Who holds ``name``: ``held`` is False for a free name.

        ``tenant``: another tenant's lock of that name, for a credential
        with the ``admin`` permission (PERMISSION_DENIED otherwise); empty
        for the caller's own."""
        r = self._unary("Describe", pb.DescribeRequest(name=name, tenant=tenant))
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
        r = self._unary("CheckFence", pb.CheckFenceRequest(name=name, fence=fence))
        return FenceCheck(current=r.current, current_fence=r.current_fence)

    def leader(self, election: str) -> Optional[Leader]:
        """The current leader of ``election``, or None."""
        return Leader._from(self._unary("Leader", pb.LeaderRequest(election=election)))

    def observe(self, election: str) -> Observation:
        """The leadership of ``election`` now, then every change as it
        happens (pushed by the broker, nothing polls): an iterator of
        ``Leader`` (``None``: no leader). Returns once the first answer
        arrived (within the client's ``timeout``), so refusals
        (UNAUTHENTICATED, INVALID_ARGUMENT) raise here; after that the stream
        has no deadline. Cancel it, or use it as a context manager, to end
        it."""
        self._check_open()
        try:
            call, first = self._brokers.open_stream(
                "Observe", pb.ObserveRequest(election=election), timeout=self._timeout
            )
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None
        except StopIteration:
            raise LeaseholdError("the broker ended the Observe stream without an answer") from None
        observation = Observation(call, first)
        self._observations.add(observation)
        return observation

    # -- administration ------------------------------------------------------

    def revoke(self, name: str, tenant: str = "") -> int:
        """Ends the current lease on ``name``, whoever holds it, and returns
        its fence. Its holder hears it is lost (``REVOKED``) at its next
        heartbeat, its lock-delay starts, waiters are woken, and the next
        grant gets a higher fence.

        An operator's tool: the credential needs the ``admin`` permission
        (without an --auth-file, the broker must run with --enable-revoke);
        otherwise :class:`LeaseholdError` with code PERMISSION_DENIED.
        ``tenant``: another tenant's lock of that name (empty: the caller's
        own). NOT_FOUND if the name is not held."""
        return self._unary("Revoke", pb.RevokeRequest(name=name, tenant=tenant)).fence

    def _unary(self, method: str, request):
        self._check_open()
        try:
            return self._brokers.call(method, request, timeout=self._timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    # -- lifetime ------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise LeaseholdError("the client is closed")

    def close(self) -> None:
        """Releases the leases still held (best effort), ends the open
        observations, stops the keeper thread and closes the channels."""
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
        for observation in list(self._observations):
            observation.cancel()
        self._keeper.close()
        self._brokers.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        # Whether there is a token, never any of it.
        token = ", token=<redacted>" if self._brokers.metadata else ""
        if len(self.targets) == 1:
            where = f"target={self.target!r}"
        else:
            where = f"targets={list(self.targets)!r}, current={self.target!r}"
        return f"Client({where}, tls={self.tls}{token})"
