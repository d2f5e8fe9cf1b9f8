"""The Client: acquire and release on its Session stream (or unary calls),
other calls unary, and leases kept alive by its keeper thread."""

from __future__ import annotations

import threading
import time
import weakref
from typing import Any, Dict, Iterator, Optional, Sequence, Tuple, Union

import grpc

from . import _core
from . import _wire
from ._advice import AdviceCallback, TtlAdvice
from ._brokers import Brokers
from ._core import (  # noqa: F401 (re-exported: the public names live here)
    Description,
    FenceCheck,
    Leader,
    ListPage,
    Listed,
    Pem,
    Seconds,
    _ms,
    _seconds,
    default_holder,
)
from ._keeper import Keeper
from ._lease import Lease, _Held
from ._proto import leasehold_pb2 as pb
from ._session import UNARY, Session, stream_full, unsupported
from .errors import LeaseholdError, from_rpc_error


class Observation:
    """The leadership of an election as it is now, then every change, as the
    broker pushes them: iterate over it for ``Leader`` objects (``None``
    when the election has no leader). Returned by :meth:`Client.observe`.

    The iteration ends after :meth:`cancel` (or the end of a ``with``
    block). If the stream breaks (the broker shut down or died), the next
    step raises :class:`LeaseholdError` (UNAVAILABLE): observe again, which
    goes to another replica if this one cannot be reached."""

    def __init__(self, call, first):
        self._call = call
        self._first = first
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

    ``session`` (default True): acquire, release and the heartbeats go as
    messages on one Session stream per client, which costs the broker about
    half of a unary call each; a broker that does not know the Session RPC
    (UNIMPLEMENTED) gets unary calls and a KeepAlive stream instead.
    ``session=False`` always uses those. Errors are the same either way.

    TTL advice: the broker compares each lease's TTL with the round trips
    of the heartbeats that renew it; when a TTL is under ten times their
    p99, the client logs a warning once per heartbeat stream, keeps the
    advice in :attr:`ttl_advice` and calls ``on_ttl_advice(advice)`` (a
    :class:`TtlAdvice`; on a short-lived thread, once per stream). Or let
    the broker choose: ``acquire(name, ttl="auto")``.

    One background thread keeps every lease of the client alive over that
    stream. Close the client (or use it as a context manager) to release its
    leases and stop that thread.
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
        session: bool = True,
        on_ttl_advice: Optional[AdviceCallback] = None,
    ):
        settings = _core.channel_settings(
            target,
            tls=tls,
            client_cert=client_cert,
            client_key=client_key,
            server_name=server_name,
            token=token,
            credentials=credentials,
            options=options,
        )

        def channel(t: str) -> grpc.Channel:
            if settings.credentials is not None:
                return grpc.secure_channel(t, settings.credentials, settings.options)
            return grpc.insecure_channel(t, settings.options)

        self._brokers = Brokers(settings.targets, channel, settings.metadata)
        #: The broker addresses given, in order.
        self.targets: Tuple[str, ...] = self._brokers.targets
        #: Whether the channels use TLS.
        self.tls = settings.tls
        self._timeout = timeout
        # The broker's --max-wait as last learnt (see _core.WaitPlan).
        self._max_wait = _core.DEFAULT_MAX_WAIT
        # The Session stream (opened by the first request that needs it).
        self._session: Optional[Session] = Session(self._brokers) if session else None
        self._keeper = Keeper(self._brokers, self._session, on_ttl_advice)
        # Open observations, cancelled by close() so that they end cleanly.
        self._observations: "weakref.WeakSet[Observation]" = weakref.WeakSet()
        self._closed = False

    @property
    def target(self) -> str:
        """The broker address calls go to now (with several, the one in use)."""
        return self._brokers.target

    @property
    def ttl_advice(self) -> Optional[TtlAdvice]:
        """The broker's TTL advice on the last heartbeat answered: set while
        some lease it renewed has a TTL under ten times the p99 of the
        heartbeat round trips measured on its stream (lengthen it, or use
        ``ttl="auto"``); None when that heartbeat's leases are fine, or
        before the broker has measured three round trips."""
        return self._keeper.advice

    # -- leases --------------------------------------------------------------

    def acquire(
        self,
        name: str,
        ttl: Union[Seconds, str],
        wait: Optional[Seconds] = 0,
        holder: Optional[str] = None,
        *,
        margin: Optional[Seconds] = None,
        lock_delay: Seconds = 0,
        limit: int = 0,
    ) -> Lease:
        """Takes the lease on ``name`` for ``ttl`` seconds, renewed in the
        background until released or lost.

        ``ttl="auto"``: the broker chooses, from the heartbeat round trips it
        measured (ten times their p99, at least its ``--ttl-auto-floor``, 10 s
        unless configured, within its ``--ttl-min`` and ``--ttl-max``); the
        lease's :attr:`~Lease.ttl` says what it chose, and each renewal
        follows the latency measured on the keeper's stream since (the TTL,
        the deadline and the heartbeat interval with it).

        ``wait``: how long to wait if the lock is held (0: try once; a try
        never jumps the queue of waiting callers; None: as long as it takes).
        A wait longer than the broker's ``--max-wait`` is a chain of waiting
        calls, one after the other, each waiting in the place in line the
        previous one kept (see README: Long waits). ``holder``: the label
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
        request, wait_s = _core.acquire_request(name, ttl, wait, holder, lock_delay, limit)
        if margin is not None:
            _seconds(margin, "margin")
        given = dict(name=name, ttl=ttl, wait=wait, holder=holder, lock_delay=lock_delay, limit=limit)
        return self._chained("Acquire", request, wait_s, margin, given)

    def _chained(
        self, method: str, request, wait_s: Optional[float], margin: Optional[Seconds], given: Dict[str, Any]
    ) -> Lease:
        """Acquire or Campaign, waiting ``wait_s`` (None: without end) in a
        chain of calls within the broker's --max-wait (_core.WaitPlan)."""
        chain = _core.Chain(method, request, wait_s, self._max_wait, len(self._brokers), given)
        woken = threading.Event()
        granted: Optional[_core.ChainCall] = None
        # The next call is a unary one even with a session (the stream
        # refused it for holding too many leases).
        unary = False
        try:
            while granted is None:
                if chain.needs_call(time.monotonic()):
                    req, segment = chain.request(time.monotonic())
                    # The deadline counts from the time the request was *sent*.
                    sent = time.monotonic()
                    session = self._session
                    if method == "Acquire" and session is not None and not unary and session.usable():
                        future = session.submit("acquire", req, segment + self._timeout)
                        index = future.index
                    else:
                        index, stub = self._brokers.current()
                        future = getattr(stub, method).future(
                            req, timeout=segment + self._timeout, metadata=self._brokers.metadata
                        )
                    unary = False
                    future.add_done_callback(lambda _: woken.set())
                    chain.sent(future, sent, segment, index)
                woken.clear()
                for call in list(chain.calls):
                    if not call.handle.done():
                        continue
                    error = call.handle.exception()
                    if error is None:
                        granted = call
                        break
                    if unsupported(error) or stream_full(error):
                        # Never served: again at once, as a unary call.
                        unary = stream_full(error)
                        chain.retry(call)
                        continue
                    failure = chain.failed(call, error, self._brokers.move_on, time.monotonic())
                    if failure is not None:
                        raise failure from None
                if granted is None and not chain.needs_call(time.monotonic()):
                    woken.wait()
        finally:
            self._max_wait = chain.plan.max_wait
            for call in chain.calls:
                if call is not granted:
                    self._abandon(call.handle)
        response = granted.handle.result()
        lease = self._hold(response.lease, response.waited_ms, granted.sent, margin, getattr(request, "ttl_auto", False))
        lease.waited = granted.sent - chain.plan.start + response.waited_ms / 1000.0
        return lease

    def _abandon(self, future) -> None:
        """Cancels a waiting Acquire the caller no longer needs: the broker
        drops its place in line, and releases a grant that crossed the
        cancellation. One that was granted before is released here."""
        if future.cancel() or not future.done():
            return
        if future.exception() is None:
            lease = future.result().lease
            self._keeper.release_in_background(lease.name, lease.owner_token)

    def campaign(self, election: str, value: str, ttl: Seconds, wait: Optional[Seconds] = 0) -> Lease:
        """Becomes the leader of ``election`` with ``value`` (waiting up to
        ``wait``; None: as long as it takes, as for :meth:`acquire`). The lease returned is the leadership: its fence is the
        leader's term, attach it to what the leader writes; release it to
        resign. Raises :class:`NotAcquired` if another leader remains."""
        self._check_open()
        request = pb.CampaignRequest(election=election, value=value, ttl_ms=_ms(_seconds(ttl, "ttl")))
        given = dict(election=election, value=value, ttl=ttl, wait=wait)
        return self._chained("Campaign", request, None if wait is None else _seconds(wait, "wait"), None, given)

    def _hold(self, lease: pb.Lease, waited_ms: int, sent: float, margin: Optional[Seconds], auto: bool = False) -> Lease:
        held = _core.held_from(lease, waited_ms, sent, margin, auto)
        self._keeper.add(held)
        return Lease(held, self, waited_ms / 1000.0)

    def _release_held(self, held: _Held, timeout: Optional[float] = None) -> None:
        lost = _core.released_loss(held)
        self._keeper.forget(held)
        if lost is not None:
            if lost.reason is _core.LossReason.DEADLINE_PASSED:
                # It may still exist on the broker: free it for the next holder.
                self._keeper.release_in_background(held.name, held.token)
            raise lost
        self.release_token(held.name, held.token, timeout=timeout)

    def release_token(self, name: str, owner_token: str, *, timeout: Optional[float] = None) -> None:
        """Releases a lease known only by its name and owner token (e.g. taken
        by another process). Raises :class:`LeaseLost` if it is already gone."""
        self._check_open()
        try:
            self._lease_call(
                "release",
                pb.ReleaseRequest(name=name, owner_token=owner_token),
                self._timeout if timeout is None else timeout,
            )
        except grpc.RpcError as e:
            raise _core.release_error(e, {"name": name}) from None

    def _lease_call(self, kind: str, request, timeout: float):
        """A request of the Session stream (``kind``: its field), on the
        stream or as the unary call. Raises ``grpc.RpcError``."""
        if self._session is not None:
            return self._session.call(kind, request, timeout)
        return self._brokers.call(UNARY[kind], request, timeout=timeout)

    # -- questions -----------------------------------------------------------

    def describe(self, name: str, tenant: str = "") -> Description:
        """Who holds ``name``: ``held`` is False for a free name.

        ``tenant``: another tenant's lock of that name, for a credential
        with the ``admin`` permission (PERMISSION_DENIED otherwise); empty
        for the caller's own."""
        return _core.description(self._unary("Describe", pb.DescribeRequest(name=name, tenant=tenant), name=name, tenant=tenant))

    def list_page(self, prefix: str = "", tenant: str = "", page_size: int = 0, page_token: str = "") -> ListPage:
        """One page of the names that start with ``prefix`` and have
        something on them now (a lease, permits, callers waiting, a
        lock-delay), as :class:`Listed` entries, without owner tokens.

        ``tenant``: empty for the caller's own names; another tenant's
        (``@root`` for the root namespace), or ``"*"`` for every tenant's,
        needs the ``admin`` permission (PERMISSION_DENIED otherwise).
        ``page_size``: the most names the broker looks at in this call (0:
        its default, 100; above 1000 it refuses with INVALID_ARGUMENT,
        ``reason`` BAD_ARGUMENT, ``metadata["argument"] == "page_size"``).
        So a page may hold fewer entries than that, even none, while
        ``next_page_token`` is not empty: pass it back as ``page_token``,
        with the same ``prefix`` and ``tenant``, until it is. Or let
        :meth:`list` walk the pages."""
        request = _core.list_request(prefix, tenant, page_size, page_token)
        given = dict(prefix=prefix, tenant=tenant, page_size=page_size, page_token=page_token)
        return _core.list_page(self._unary("List", request, **given))

    def list(self, prefix: str = "", tenant: str = "", page_size: int = 0) -> Iterator[Listed]:
        """Every name that starts with ``prefix`` and has something on it:
        an iterator that asks for each page (see :meth:`list_page`) as the
        previous one is used up, so a listing of any length holds one page
        in memory. A refusal raises where the iteration is.

        Each entry is as the broker saw it when it read that page: a name
        held for the whole walk is listed; one taken or freed during it may
        or may not be. Names come in name order, except on a Redis store
        (its SCAN's order), where a name may also come **twice** (on two
        pages). The iterator does not remove those: it would have to
        remember every name of the walk. Keep the last entry per
        ``(tenant, name)`` when that matters, as ``leasehold list`` does::

            latest = {(l.tenant, l.name): l for l in client.list("jobs/")}
        """
        token = ""
        while True:
            page = self.list_page(prefix, tenant, page_size, token)
            yield from page.locks
            if not page.next_page_token:
                return
            token = page.next_page_token

    def check_fence(self, name: str, fence: int) -> FenceCheck:
        """Whether ``fence`` is the fence of the current lease on ``name``,
        for a resource that cannot remember the highest fence it has seen.
        The answer can be stale by the time it arrives: a resource that keeps
        the highest fence itself is safer."""
        r = self._unary("CheckFence", pb.CheckFenceRequest(name=name, fence=fence), name=name)
        return FenceCheck(current=r.current, current_fence=r.current_fence)

    def leader(self, election: str) -> Optional[Leader]:
        """The current leader of ``election``, or None."""
        return Leader._from(self._unary("Leader", pb.LeaderRequest(election=election), election=election))

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
                "Observe", _wire.observe_request(election), timeout=self._timeout
            )
        except grpc.RpcError as e:
            raise from_rpc_error(e, {"election": election}) from None
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
        return self._unary("Revoke", pb.RevokeRequest(name=name, tenant=tenant), name=name, tenant=tenant).fence

    def _unary(self, method: str, request, **given: Any):
        """A unary call; ``given``: the caller's arguments, for the message
        of a refusal of one."""
        self._check_open()
        try:
            return self._brokers.call(method, request, timeout=self._timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e, given) from None

    # -- lifetime ------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise LeaseholdError("the client is closed")

    def close(self) -> None:
        """Releases the leases still held (best effort), ends the open
        observations, stops the keeper thread, ends the Session stream (an
        acquire waiting in another thread fails with CANCELLED) and closes
        the channels."""
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
        if self._session is not None:
            self._session.close()
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
