"""The asyncio client (grpc.aio): the same rules as the synchronous Client,
with the keeper as a task of the event loop instead of a thread.

What the two share lives in _core (options, requests, deadlines, errors,
long waits) and _keepcore with _heartbeat (the keeper's state machine and
its rules); this module only does the I/O the asyncio way.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
import weakref
from typing import Any, AsyncIterator, Awaitable, Callable, Dict, List, Optional, Sequence, Set, Tuple, Union

import grpc
import grpc.aio

from . import _core, _keepcore as kc, _wire
from ._advice import AdviceCallback, TtlAdvice
from ._brokers import Brokers, not_connected
from ._core import Description, FenceCheck, Leader, ListPage, Listed, Pem, Seconds, _ms, _seconds
from ._lease import _Held, _LeaseView
from ._proto import leasehold_pb2 as pb
from ._session import UNARY, AioSession, Beats, stream_full, unsupported
from .errors import LeaseholdError, LossReason, from_rpc_error

log = logging.getLogger("leasehold")

#: A lost callback: a function of the reason, or a coroutine function (its
#: coroutine then runs as a task of the loop).
AsyncLostCallback = Callable[[LossReason], Union[None, Awaitable[None]]]


def _run_callback(callback: Callable[[Any], Any], arg: Any, what: str, tasks: Set["asyncio.Task"]) -> None:
    """Calls ``callback(arg)`` (a coroutine function's coroutine as a task
    kept in ``tasks``); ``what`` names it in the log if it raises."""
    try:
        result = callback(arg)
        if inspect.isawaitable(result):
            task = asyncio.ensure_future(result)
            tasks.add(task)
            task.add_done_callback(tasks.discard)
    except Exception:  # a broken callback must not stop the others
        log.exception("%s raised", what)


class _AioBrokers(Brokers):
    """The replicas, with grpc.aio channels (the generated stub takes
    either kind)."""

    async def acall(self, method: str, request, timeout: float):
        attempts = len(self)
        while True:
            index, stub = self.current()
            try:
                return await getattr(stub, method)(request, timeout=timeout, metadata=self.metadata)
            except grpc.RpcError as e:
                if attempts > 1 and not_connected(e):
                    self.unreachable(index)
                    attempts -= 1
                    continue
                raise

    async def aclose(self) -> None:
        for channel in self._channels:
            await channel.close()


class _Stream:
    """One KeepAlive call, to the replica calls go to when it opens: a
    writer task fed from a queue, a reader task that posts the answers to
    the keeper's inbox, tagged with the stream's generation so that news
    from an abandoned stream is ignored."""

    def __init__(self, brokers: _AioBrokers, gen: int, inbox: "asyncio.Queue"):
        self.gen = gen
        self.index, stub = brokers.current()
        self._call = stub.KeepAlive(metadata=brokers.metadata)
        self._requests: "asyncio.Queue[Optional[pb.KeepAliveRequest]]" = asyncio.Queue()
        self._writer = asyncio.ensure_future(self._write())
        self._reader = asyncio.ensure_future(self._read(inbox))

    async def _write(self) -> None:
        try:
            while True:
                request = await self._requests.get()
                if request is None:
                    await self._call.done_writing()
                    return
                await self._call.write(request)
        except Exception:
            return  # the call ended: the reader reports how

    async def _read(self, inbox: "asyncio.Queue") -> None:
        error: Optional[BaseException] = None
        try:
            while True:
                response = await self._call.read()
                if response is grpc.aio.EOF:
                    break
                inbox.put_nowait(kc.Answered(self.gen, response))
        except asyncio.CancelledError:
            pass
        except Exception as e:
            error = e
        inbox.put_nowait(kc.StreamEnded(self.gen, self.index, error))

    def send(self, request: pb.KeepAliveRequest) -> None:
        self._requests.put_nowait(request)

    def backlog(self) -> int:
        """Heartbeats not yet written (the core's stall rule)."""
        return self._requests.qsize()

    def half_close(self) -> None:
        """Ends the stream cleanly (and, on an ended call, the writer)."""
        self._requests.put_nowait(None)

    def cancel(self) -> None:
        self._call.cancel()
        self._writer.cancel()


class _Keeper(kc.Driver):
    """One task per AsyncClient that keeps all its leases alive over one
    stream (the client's Session stream, or a KeepAlive stream when the
    session is off or the broker does not know it): the I/O, with tasks and
    grpc.aio, of the core that the synchronous keeper drives too
    (_keepcore.KeeperCore). One event loop runs it all, so unlike the
    thread keeper it needs no lock."""

    def __init__(
        self,
        brokers: _AioBrokers,
        session: Optional[AioSession] = None,
        on_ttl_advice: Optional[AdviceCallback] = None,
    ):
        self._brokers: _AioBrokers = brokers
        self._session = session
        self._on_ttl_advice = on_ttl_advice
        self._core = kc.KeeperCore()
        self._stream: Optional[_Stream] = None
        self._inbox: "asyncio.Queue" = asyncio.Queue()
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.ensure_future(self._run())
        # Tasks started and not awaited (background releases, coroutine
        # callbacks): referenced until done, so they are not collected.
        self.tasks: Set["asyncio.Task"] = set()

    def add(self, held: _Held) -> None:
        self._core.add(held)
        self._inbox.put_nowait(kc.LeaseAdded())

    def forget(self, held: _Held) -> None:
        self._core.forget(held)

    def dropped(self, held: _Held) -> None:
        """A lease handle was garbage-collected unreleased (from any thread)."""
        try:
            self._loop.call_soon_threadsafe(self._inbox.put_nowait, kc.LeaseDropped(held))
        except RuntimeError:
            pass  # the loop is closed: the lease expires at its TTL

    def snapshot(self) -> List[_Held]:
        return self._core.leases()

    @property
    def advice(self) -> Optional[TtlAdvice]:
        return self._core.advice

    def release_in_background(self, name: str, token: str) -> None:
        request = pb.ReleaseRequest(name=name, owner_token=token)

        async def release() -> None:
            try:
                if self._session is not None:
                    await self._session.call("release", request, 5.0)
                else:
                    await self._brokers.acall("Release", request, timeout=5)
            except Exception:
                pass

        self._spawn(release())

    def _spawn(self, coroutine) -> None:
        task = asyncio.ensure_future(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def close(self) -> None:
        self._inbox.put_nowait(kc.Close())
        try:
            await asyncio.wait_for(asyncio.shield(self._task), 5.0)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            self._task.cancel()
        if self.tasks:
            await asyncio.wait(list(self.tasks), timeout=5.0)

    async def _run(self) -> None:
        try:
            await self._loop_forever()
        except asyncio.CancelledError:
            raise
        except Exception:  # pragma: no cover - a bug; leases then expire
            log.exception("leasehold keeper task crashed; leases will no longer be renewed")

    async def _loop_forever(self) -> None:
        event: kc.Event = kc.TimerFired()
        while True:
            sleep = self._perform(self._core.handle(event, time.monotonic(), self._backlog()))
            if sleep is None:
                return
            try:
                event = await asyncio.wait_for(self._inbox.get(), sleep.timeout(time.monotonic()))
            except asyncio.TimeoutError:
                event = kc.TimerFired()

    def _open(self, gen: int) -> kc.Stream:
        """Heartbeats on the Session stream while its replica knows it;
        else a KeepAlive stream."""
        if self._session is not None and self._session.usable():
            try:
                return Beats(self._session, gen, self._inbox.put_nowait)
            except LeaseholdError:
                pass  # closed meanwhile
        return _Stream(self._brokers, gen, self._inbox)

    def _fire(self, callbacks: list, reason: LossReason, name: str) -> None:
        """Runs each lost callback as a callback of the loop (a coroutine
        function's coroutine as a task)."""
        for callback in callbacks:
            self._loop.call_soon(_run_callback, callback, reason, f"lost callback for lease {name!r}", self.tasks)

    def _advise(self, advice: TtlAdvice) -> None:
        """Runs ``on_ttl_advice`` as a callback of the loop (a coroutine
        function's coroutine as a task), as lost callbacks."""
        if self._on_ttl_advice is not None:
            self._loop.call_soon(_run_callback, self._on_ttl_advice, advice, "on_ttl_advice callback", self.tasks)


class AsyncLease(_LeaseView):
    """A held lease, renewed in the background by its :class:`AsyncClient`:
    the asyncio twin of :class:`Lease` (same properties, ``check()``,
    fence), with ``await lease.release()``, ``await lease.wait_lost()`` and
    ``async with``."""

    def __init__(self, held: _Held, client: "AsyncClient", waited: float):
        self._held = held
        self._client = client
        #: How long the acquire waited for the lock, in seconds.
        self.waited = waited
        self._lost = asyncio.Event()
        loop = asyncio.get_running_loop()

        def marked() -> None:
            try:
                loop.call_soon_threadsafe(self._lost.set)
            except RuntimeError:
                pass  # the loop is closed

        held.on_marked = marked

    def on_lost(self, callback: AsyncLostCallback) -> AsyncLostCallback:
        """Calls ``callback(reason)`` once, in the event loop, when the lease
        is lost (the broker said so, or the local deadline passed without a
        confirmed renewal). A coroutine function's coroutine runs as a task.
        A release is not a loss. Returns ``callback`` (usable as a
        decorator)."""
        reason = self._held.add_callback(callback)  # type: ignore[arg-type]
        if reason is not None and not self._held.released:
            asyncio.get_running_loop().call_soon(
                _run_callback, callback, reason, f"lost callback for lease {self._held.name!r}", self._client._background
            )
        return callback

    async def wait_lost(self, timeout: Optional[float] = None) -> Optional[LossReason]:
        """Waits until the lease is lost, for at most ``timeout`` seconds;
        returns the reason, or None if it is still held."""
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            reason = self._held.loss()
            if reason is not None:
                return reason
            now = time.monotonic()
            wake = self._held.deadline
            if end is not None:
                if now >= end:
                    return None
                wake = min(wake, end)
            try:
                # Woken early by the loss; otherwise at the deadline, which
                # the loop then sees as passed.
                await asyncio.wait_for(self._lost.wait(), max(0.0, wake - now) + 0.001)
            except asyncio.TimeoutError:
                pass

    async def release(self) -> None:
        """Stops renewing the lease and releases it, waking the next waiter.
        Raises :class:`LeaseLost` if it was already lost; a second call does
        nothing."""
        if self._held.released:
            return
        await self._client._release_held(self._held)

    async def __aenter__(self) -> "AsyncLease":
        return self

    async def __aexit__(self, exc_type, exc, tb) -> None:
        # As Lease.__exit__: LeaseLost only if the block itself succeeded.
        try:
            await self.release()
        except Exception:
            if exc_type is None:
                raise
            log.debug("releasing lease %r on the way out of a failed block failed", self._held.name, exc_info=True)

    def __del__(self) -> None:
        try:
            if not self._held.released and self._client._keeper is not None:
                self._client._keeper.dropped(self._held)
        except Exception:
            pass


class _Acquiring:
    """What :meth:`AsyncClient.acquire` returns: await it for the lease, or
    use it in ``async with`` to release the lease at the end of the block."""

    def __init__(self, coroutine):
        self._coroutine = coroutine
        self._lease: Optional[AsyncLease] = None

    def __await__(self):
        return self._coroutine.__await__()

    async def __aenter__(self) -> AsyncLease:
        self._lease = await self._coroutine
        return self._lease

    async def __aexit__(self, exc_type, exc, tb) -> None:
        assert self._lease is not None
        await self._lease.__aexit__(exc_type, exc, tb)


class AsyncObservation:
    """The leadership of an election now, then every change: ``async for``
    over it for ``Leader`` objects (``None``: no leader). Returned by
    :meth:`AsyncClient.observe`; ends after :meth:`cancel` (or the end of an
    ``async with`` block); a broken stream raises :class:`LeaseholdError`."""

    def __init__(self, call, first):
        self._call = call
        self._first = first
        self._cancelled = False

    def __aiter__(self) -> "AsyncObservation":
        return self

    async def __anext__(self) -> Optional[Leader]:
        if self._cancelled:
            raise StopAsyncIteration
        if self._first is not None:
            r, self._first = self._first, None
            return Leader._from(r)
        try:
            r = await self._call.read()
        except asyncio.CancelledError:
            if self._cancelled:
                raise StopAsyncIteration from None
            raise
        except grpc.RpcError as e:
            if self._cancelled:
                raise StopAsyncIteration from None
            raise from_rpc_error(e) from None
        if r is grpc.aio.EOF:
            raise StopAsyncIteration
        return Leader._from(r)

    def cancel(self) -> None:
        self._cancelled = True
        self._call.cancel()

    async def __aenter__(self) -> "AsyncObservation":
        return self

    async def __aexit__(self, *exc) -> None:
        self.cancel()


class AsyncClient:
    """The asyncio client: the same options and rules as :class:`Client`
    (see it for ``target``, TLS and tokens), its calls coroutines::

        async with AsyncClient("127.0.0.1:7420") as client:
            async with client.acquire("jobs/nightly", ttl=10, wait=None) as lease:
                lease.check()
                await write_report(fence=lease.fence)

    Acquire, release and heartbeats go on one Session stream unless
    ``session=False`` (see :class:`Client`). One task of the running event
    loop keeps every lease of the client alive over it. Use the client from
    one event loop; close it (``await client.close()``, or ``async with``)
    to release its leases. ``on_ttl_advice`` (a function of the
    :class:`TtlAdvice`, or a coroutine function) runs in the loop, once per
    heartbeat stream whose leases the broker advises on (see
    :class:`Client`)."""

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
        self._settings = _core.channel_settings(
            target,
            tls=tls,
            client_cert=client_cert,
            client_key=client_key,
            server_name=server_name,
            token=token,
            credentials=credentials,
            options=options,
        )
        #: The broker addresses given, in order.
        self.targets: Tuple[str, ...] = tuple(self._settings.targets)
        #: Whether the channels use TLS.
        self.tls = self._settings.tls
        self._timeout = timeout
        self._max_wait = _core.DEFAULT_MAX_WAIT
        # Made at first use, in the running loop (grpc.aio channels belong
        # to the loop that made them).
        self._brokers_: Optional[_AioBrokers] = None
        self._use_session = session
        self._session_: Optional[AioSession] = None
        self._keeper: Optional[_Keeper] = None
        self._on_ttl_advice = on_ttl_advice
        self._background: Set["asyncio.Task"] = set()
        self._observations: "weakref.WeakSet[AsyncObservation]" = weakref.WeakSet()
        self._closed = False

    def _brokers(self) -> _AioBrokers:
        if self._closed:
            raise LeaseholdError("the client is closed")
        if self._brokers_ is None:
            settings = self._settings

            def channel(t: str) -> grpc.aio.Channel:
                if settings.credentials is not None:
                    return grpc.aio.secure_channel(t, settings.credentials, settings.options)
                return grpc.aio.insecure_channel(t, settings.options)

            self._brokers_ = _AioBrokers(settings.targets, channel, settings.metadata)
            if self._use_session:
                self._session_ = AioSession(self._brokers_, self._spawn)
        return self._brokers_

    def _session(self) -> Optional[AioSession]:
        """The Session stream's bookkeeping (None with ``session=False``)."""
        self._brokers()
        return self._session_

    def _spawn(self, coroutine) -> None:
        task = asyncio.ensure_future(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _keeper_(self) -> _Keeper:
        if self._keeper is None:
            self._keeper = _Keeper(self._brokers(), self._session(), self._on_ttl_advice)
        return self._keeper

    @property
    def target(self) -> str:
        """The broker address calls go to now."""
        return self.targets[0] if self._brokers_ is None else self._brokers_.target

    @property
    def ttl_advice(self) -> Optional[TtlAdvice]:
        """The broker's TTL advice on the last heartbeat answered (see
        :attr:`Client.ttl_advice`)."""
        return None if self._keeper is None else self._keeper.advice

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
    ) -> _Acquiring:
        """Takes the lease on ``name`` (see :meth:`Client.acquire` for the
        arguments; ``wait=None`` waits as long as it takes; ``ttl="auto"``
        lets the broker choose and follow the latency). Use as
        ``lease = await client.acquire(...)`` or
        ``async with client.acquire(...) as lease:``. Cancelling the task
        while it waits leaves the line at once."""
        return _Acquiring(self._acquire(name, ttl, wait, holder, margin, lock_delay, limit))

    async def _acquire(self, name, ttl, wait, holder, margin, lock_delay, limit) -> AsyncLease:
        request, wait_s = _core.acquire_request(name, ttl, wait, holder, lock_delay, limit)
        if margin is not None:
            _seconds(margin, "margin")
        given = dict(name=name, ttl=ttl, wait=wait, holder=holder, lock_delay=lock_delay, limit=limit)
        return await self._chained("Acquire", request, wait_s, margin, given)

    async def _chained(
        self, method: str, request, wait_s: Optional[float], margin: Optional[Seconds], given: Dict[str, Any]
    ) -> AsyncLease:
        """Acquire or Campaign in a chain of calls (see Client._chained)."""
        brokers = self._brokers()
        session = self._session()
        chain = _core.Chain(method, request, wait_s, self._max_wait, len(brokers), given)
        granted: Optional[_core.ChainCall] = None
        # The next call is a unary one even with a session (see Client._chained).
        unary = False
        try:
            while granted is None:
                if chain.needs_call(time.monotonic()):
                    req, segment = chain.request(time.monotonic())
                    # The deadline counts from the time the request was *sent*.
                    sent = time.monotonic()
                    if method == "Acquire" and session is not None and not unary and session.usable():
                        pending = session.submit("acquire", req, segment + self._timeout)
                        chain.sent((pending, pending.future), sent, segment, pending.index)
                    else:
                        index, stub = brokers.current()
                        call = getattr(stub, method)(req, timeout=segment + self._timeout, metadata=brokers.metadata)
                        chain.sent((call, asyncio.ensure_future(_result(call))), sent, segment, index)
                    unary = False
                for c in list(chain.calls):
                    task = c.handle[1]
                    if not task.done():
                        continue
                    error = task.exception()
                    if error is None:
                        granted = c
                        break
                    if not isinstance(error, grpc.RpcError):
                        raise error
                    if unsupported(error) or stream_full(error):
                        # Never served: again at once, as a unary call.
                        unary = stream_full(error)
                        chain.retry(c)
                        continue
                    failure = chain.failed(c, error, brokers.move_on, time.monotonic())
                    if failure is not None:
                        raise failure from None
                if granted is None and chain.calls:
                    await asyncio.wait([c.handle[1] for c in chain.calls], return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._max_wait = chain.plan.max_wait
            for c in chain.calls:
                if c is not granted:
                    self._abandon(*c.handle)
        response = granted.handle[1].result()
        lease = self._hold(response.lease, response.waited_ms, granted.sent, margin, getattr(request, "ttl_auto", False))
        lease.waited = granted.sent - chain.plan.start + response.waited_ms / 1000.0
        return lease

    def _abandon(self, call, task: "asyncio.Future") -> None:
        """Cancels a waiting Acquire no longer needed (the broker drops its
        place, and releases a grant that crossed the cancellation); one
        granted before is released here. ``call``: the grpc.aio call, or
        the request on the Session stream (whose cancel sends ``cancel``)."""
        call.cancel()

        def done(t: "asyncio.Task") -> None:
            if t.cancelled() or t.exception() is not None:
                return
            lease = t.result().lease
            self._keeper_().release_in_background(lease.name, lease.owner_token)

        task.add_done_callback(done)

    async def campaign(self, election: str, value: str, ttl: Seconds, wait: Optional[Seconds] = 0) -> AsyncLease:
        """Becomes the leader of ``election`` (see :meth:`Client.campaign`;
        ``wait=None`` waits as long as it takes)."""
        self._brokers()
        request = pb.CampaignRequest(election=election, value=value, ttl_ms=_ms(_seconds(ttl, "ttl")))
        given = dict(election=election, value=value, ttl=ttl, wait=wait)
        return await self._chained("Campaign", request, None if wait is None else _seconds(wait, "wait"), None, given)

    def _hold(
        self, lease: pb.Lease, waited_ms: int, sent: float, margin: Optional[Seconds], auto: bool = False
    ) -> AsyncLease:
        held = _core.held_from(lease, waited_ms, sent, margin, auto)
        handle = AsyncLease(held, self, waited_ms / 1000.0)
        self._keeper_().add(held)
        return handle

    async def _release_held(self, held: _Held, timeout: Optional[float] = None) -> None:
        lost = _core.released_loss(held)
        keeper = self._keeper_()
        keeper.forget(held)
        if lost is not None:
            if lost.reason is LossReason.DEADLINE_PASSED:
                keeper.release_in_background(held.name, held.token)
            raise lost
        await self.release_token(held.name, held.token, timeout=timeout)

    async def release_token(self, name: str, owner_token: str, *, timeout: Optional[float] = None) -> None:
        """Releases a lease known only by its name and owner token. Raises
        :class:`LeaseLost` if it is already gone."""
        try:
            await self._lease_call(
                "release",
                pb.ReleaseRequest(name=name, owner_token=owner_token),
                self._timeout if timeout is None else timeout,
            )
        except grpc.RpcError as e:
            raise _core.release_error(e, {"name": name}) from None

    async def _lease_call(self, kind: str, request, timeout: float):
        """A request of the Session stream, on it or as the unary call
        (see Client._lease_call). Raises ``grpc.RpcError``."""
        session = self._session()
        if session is not None:
            return await session.call(kind, request, timeout)
        return await self._brokers().acall(UNARY[kind], request, timeout=timeout)

    # -- questions -----------------------------------------------------------

    async def describe(self, name: str, tenant: str = "") -> Description:
        """Who holds ``name`` (see :meth:`Client.describe`)."""
        return _core.description(await self._unary("Describe", pb.DescribeRequest(name=name, tenant=tenant), name=name, tenant=tenant))

    async def list_page(self, prefix: str = "", tenant: str = "", page_size: int = 0, page_token: str = "") -> ListPage:
        """One page of the names that start with ``prefix`` and have
        something on them (see :meth:`Client.list_page`)."""
        request = _core.list_request(prefix, tenant, page_size, page_token)
        given = dict(prefix=prefix, tenant=tenant, page_size=page_size, page_token=page_token)
        return _core.list_page(await self._unary("List", request, **given))

    async def list(self, prefix: str = "", tenant: str = "", page_size: int = 0) -> AsyncIterator[Listed]:
        """Every name that starts with ``prefix`` and has something on it,
        for ``async for``: each page is asked for as the previous one is
        used up. On a Redis store a name may come twice (see
        :meth:`Client.list`)."""
        token = ""
        while True:
            page = await self.list_page(prefix, tenant, page_size, token)
            for listed in page.locks:
                yield listed
            if not page.next_page_token:
                return
            token = page.next_page_token

    async def check_fence(self, name: str, fence: int) -> FenceCheck:
        """Whether ``fence`` is the current lease's (see :meth:`Client.check_fence`)."""
        r = await self._unary("CheckFence", pb.CheckFenceRequest(name=name, fence=fence), name=name)
        return FenceCheck(current=r.current, current_fence=r.current_fence)

    async def leader(self, election: str) -> Optional[Leader]:
        """The current leader of ``election``, or None."""
        return Leader._from(await self._unary("Leader", pb.LeaderRequest(election=election), election=election))

    async def observe(self, election: str) -> AsyncObservation:
        """The leadership of ``election`` now, then every change: returns
        once the first answer arrived (within the client's ``timeout``), so
        refusals raise here (see :meth:`Client.observe`)."""
        brokers = self._brokers()
        attempts = len(brokers)
        while True:
            index, stub = brokers.current()
            call = stub.Observe(_wire.observe_request(election), metadata=brokers.metadata)
            try:
                first = await asyncio.wait_for(call.read(), self._timeout)
            except asyncio.TimeoutError:
                call.cancel()
                raise LeaseholdError(
                    f"DEADLINE_EXCEEDED: no answer to Observe within {self._timeout:g} s",
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                ) from None
            except grpc.RpcError as e:
                if attempts > 1 and not_connected(e):
                    brokers.unreachable(index)
                    attempts -= 1
                    continue
                raise from_rpc_error(e, {"election": election}) from None
            if first is grpc.aio.EOF:
                raise LeaseholdError("the broker ended the Observe stream without an answer")
            observation = AsyncObservation(call, first)
            self._observations.add(observation)
            return observation

    # -- administration ------------------------------------------------------

    async def revoke(self, name: str, tenant: str = "") -> int:
        """Ends the current lease on ``name``, whoever holds it (see
        :meth:`Client.revoke`)."""
        return (await self._unary("Revoke", pb.RevokeRequest(name=name, tenant=tenant), name=name, tenant=tenant)).fence

    async def _unary(self, method: str, request, **given: Any):
        try:
            return await self._brokers().acall(method, request, timeout=self._timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e, given) from None

    # -- lifetime ------------------------------------------------------------

    async def close(self) -> None:
        """Releases the leases still held (best effort), ends the open
        observations, stops the keeper task and closes the channels."""
        if self._closed:
            return
        if self._keeper is not None:
            for held in self._keeper.snapshot():
                try:
                    # Short: a broker that is down must not hold up the close.
                    await self._release_held(held, timeout=2.0)
                except Exception:
                    pass
        for observation in list(self._observations):
            observation.cancel()
        if self._keeper is not None:
            await self._keeper.close()
        if self._background:
            await asyncio.wait(list(self._background), timeout=5.0)
        if self._session_ is not None:
            await self._session_.close()
        self._closed = True
        if self._brokers_ is not None:
            await self._brokers_.aclose()

    aclose = close

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    def __repr__(self) -> str:
        token = ", token=<redacted>" if self._settings.metadata else ""
        return f"AsyncClient(targets={list(self.targets)!r}, tls={self.tls}{token})"


async def _result(call) -> Any:
    return await call
