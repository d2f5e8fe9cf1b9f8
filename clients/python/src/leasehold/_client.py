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
#: A PEM file (a path) or PEM text itself (bytes).
Pem = Union[str, "os.PathLike[str]", bytes]

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

    ``target`` is ``host:port``; ``http://`` and ``https://`` prefixes are
    accepted, and ``https://`` means TLS (as the Rust CLI's ``--broker``).
    Unary calls time out after ``timeout`` seconds (plus the requested wait,
    for acquire).

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
        target: str,
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
        scheme = None
        for prefix in ("https://", "http://"):
            if target.startswith(prefix):
                scheme, target = prefix[:-3], target[len(prefix) :]
        target = target.rstrip("/")
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
        self._metadata = _bearer_metadata(token)

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
            self._channel = grpc.secure_channel(target, credentials, opts)
        else:
            self._channel = grpc.insecure_channel(target, opts)
        self.target = target
        #: Whether the channel uses TLS.
        self.tls = wants_tls
        self._timeout = timeout
        self._stub = pb_grpc.LeaseholdStub(self._channel)
        self._keeper = Keeper(self._stub, self._metadata)
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
            response = self._stub.Acquire(request, timeout=wait_s + self._timeout, metadata=self._metadata)
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
            response = self._stub.Campaign(request, timeout=wait_s + self._timeout, metadata=self._metadata)
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
                metadata=self._metadata,
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
            return method(request, timeout=self._timeout, metadata=self._metadata)
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
        # Whether there is a token, never any of it.
        token = ", token=<redacted>" if self._metadata else ""
        return f"Client(target={self.target!r}, tls={self.tls}{token})"
