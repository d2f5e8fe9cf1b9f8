"""The Session stream: one long-lived bidi stream per client that carries
its Acquire, Release and heartbeat requests (proto: ``rpc Session``), each
with an id the client picks, answered out of order, each exactly once.

A message on an open stream costs the broker about half of a unary call, so
both clients use it by default (``session=False`` turns it off); a broker
that answers UNIMPLEMENTED (one from before the Session RPC) gets unary
calls and a KeepAlive stream instead, from then on.

What is shared by the thread client and the asyncio client is here: the
bookkeeping of requests in flight (:class:`SessionBase`), how an answer or a
stream's end becomes a request's result or error, and the keeper's stream
on the session (:class:`Beats`). The I/O of each (threads and grpc's
blocking API, or tasks and grpc.aio) is the subclasses'.

A request's failure is a ``grpc.RpcError`` with ``code()``, ``details()``
and ``trailing_metadata()``, as a unary call's: the broker's answer
(``SessionError``, its kept place as ``leasehold-place`` metadata), the
stream's end status, or a local one. So everything downstream (the chain of
a long wait, the mapping to exceptions, failover) treats both the same.

How it fails, and what each case does:

* The stream cannot be opened (no connection could be made): every request
  on it fails with that UNAVAILABLE, which says the request never left, so
  callers move on to the next replica and send it again there, as a unary
  call that could not connect.
* The stream breaks (reset, broker killed, connection lost): every request
  in flight fails with the stream's status (UNAVAILABLE), as a unary call
  whose connection broke; a waiting Acquire is not sent again (it may have
  been granted: the broker releases a grant it could not deliver). The next
  request opens a new stream, to the replica calls go to then.
* The broker shuts down (SIGTERM): it answers its waiting Acquires
  (UNAVAILABLE "shutting down", with their kept places), then ends the
  stream with UNAVAILABLE "shutting down": a request it never read fails
  with that, and may be sent to another replica.
* A slow or hung broker: each request has its ``timeout_ms`` (the unary
  call's deadline), and a local deadline a little later; past it the
  request fails DEADLINE_EXCEEDED and a ``cancel`` is sent. The keeper's
  stall rule (no answer to a heartbeat for two intervals) replaces a stream
  that heard nothing meanwhile, failing its requests with UNAVAILABLE.
* The caller gives up (task cancelled, deadline, client closed): ``cancel``
  with its id, so the broker gives up the place in line; a grant that
  crossed the cancel is released here (or by the broker, if its answer
  never left).
* The replica calls go to changes (failover, shutdown): the stream to the
  old one takes no new request; it is half-closed once its last request is
  answered (a cancel can still reach it meanwhile).
* The broker refuses a request (``SessionError``): that request fails with
  the code and message the unary call would have; the stream goes on. An
  Acquire refused because the stream holds ``--max-stream-leases`` leases
  is sent as a unary call instead.
* Ids come from one counter per client and are never reused, so the
  broker's "id already in flight" refusal cannot happen.
* Not handled: a stream with as many requests in flight as the broker's
  ``--max-concurrent-streams`` (1000 by default: that many waiting
  acquires in one client) has its next heartbeat wait for one of them to
  end, so leases with short TTLs can pass their deadlines meanwhile (and
  the stall rule closes a stream that heard nothing for two intervals,
  failing those waits with UNAVAILABLE). ``session=False`` keeps the
  heartbeats on a KeepAlive stream of their own.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import queue
import threading
import time
from typing import Callable, Dict, List, Optional, Set, Tuple

import grpc

from . import _keepcore as kc
from ._brokers import Brokers, not_connected, shutting_down
from ._proto import leasehold_pb2 as pb
from .errors import Detail, LeaseholdError, detail_from_trailers

log = logging.getLogger("leasehold")

#: The unary call each kind of request stands for.
UNARY = {"acquire": "Acquire", "renew": "Renew", "release": "Release"}

#: How much later than its ``timeout_ms`` a request fails locally when the
#: broker's own answer did not come (a hung broker, a dead connection), so
#: that the broker's answer normally comes first.
GRACE = 0.5

#: A stream counts as stalled when a heartbeat on it has waited this long
#: and nothing at all was heard on it since that heartbeat was sent (the
#: keeper's own rule asks for at least this much).
STALL = 1.0

_CODES = {c.value[0]: c for c in grpc.StatusCode}


class StreamError(grpc.RpcError):
    """A request's failure as a failed unary call reports it: the broker's
    answer (``answered``), or a local one (deadline, cancel, stall)."""

    def __init__(
        self,
        code: grpc.StatusCode,
        details: str,
        place: str = "",
        answered: bool = False,
        detail: Optional[Detail] = None,
    ):
        super().__init__(f"{code.name}: {details}")
        self._code = code
        self._details = details
        self._place = place
        #: Whether the broker answered it (a SessionError), rather than the
        #: stream's end or this client.
        self.answered = answered
        #: What the broker's details say (reason, metadata, retry delay):
        #: the SessionError's, or the ended stream's status details.
        self.detail = detail or Detail()

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self):
        # The kept place of a keep_place refusal, where a unary call has it.
        return (("leasehold-place", self._place),) if self._place else ()

    def __repr__(self) -> str:  # never the place (a secret)
        return f"StreamError({self._code.name}, {self._details!r})"


def _outcome(response: pb.SessionResponse):
    """An answer as (result, error)."""
    which = response.WhichOneof("response")
    if which == "error":
        e = response.error
        code = _CODES.get(e.code, grpc.StatusCode.UNKNOWN)
        # As a unary call's google.rpc.ErrorInfo and RetryInfo.
        detail = Detail(e.reason, dict(e.metadata), e.retry_delay_ms / 1000.0 if e.retry_delay_ms else None)
        return None, StreamError(code, e.message, e.place, answered=True, detail=detail)
    if which is None:
        return None, StreamError(grpc.StatusCode.INTERNAL, "the broker sent an empty answer", answered=True)
    return getattr(response, which), None


def unsupported(error: BaseException) -> bool:
    """Whether the stream itself was refused as unknown (UNIMPLEMENTED: a
    broker from before the Session RPC), so the request never ran."""
    code = error.code() if hasattr(error, "code") else None
    return code == grpc.StatusCode.UNIMPLEMENTED and not getattr(error, "answered", False)


def stream_full(error: BaseException) -> bool:
    """Whether an Acquire was refused because the stream holds
    ``--max-stream-leases`` leases (a unary Acquire is not bound by that):
    LIMIT_REACHED, ``limit`` ``max-stream-leases``."""
    if not getattr(error, "answered", False):
        return False
    detail = getattr(error, "detail", None) or Detail()
    return detail.reason == "LIMIT_REACHED" and detail.metadata.get("limit") == "max-stream-leases"


def never_read(error: BaseException) -> bool:
    """Whether a request failed without the broker having read it: no
    connection could be made, or the stream ended because the broker shuts
    down (it answers everything it read first). Another replica may take
    it."""
    if getattr(error, "answered", False):
        return False
    return not_connected(error) or shutting_down(error)


def _closed() -> StreamError:
    return StreamError(grpc.StatusCode.CANCELLED, "the client is closed")


class Pending:
    """One request in flight: its id, kind, stream, and the replica (index
    in the client's brokers) it went to. The subclasses are futures."""

    def __init__(self, stream: "Stream", id: int, kind: str):
        self.stream = stream
        self.id = id
        self.kind = kind
        self.index = stream.index
        self.sent = time.monotonic()
        self.session: Optional["SessionBase"] = None

    def cancel(self) -> bool:
        """Gives up the request (``cancel`` on the stream: an Acquire leaves
        the line). True if it was still in flight; False if it is answered
        (look at its result: a grant is the caller's to release)."""
        assert self.session is not None
        return self.session.abandon(self, StreamError(grpc.StatusCode.CANCELLED, "Locally cancelled"))

    # What the subclasses provide (under the session's lock).
    def _settle(self, result, error) -> None:
        raise NotImplementedError

    def done(self) -> bool:
        raise NotImplementedError

    def add_done_callback(self, fn: Callable[["Pending"], None]) -> None:
        raise NotImplementedError

    def exception(self):
        raise NotImplementedError

    def result(self):
        raise NotImplementedError


class Stream:
    """One Session call, to the replica at ``index``: what is in flight on
    it. The I/O (write, half-close, kill) is the subclasses'."""

    def __init__(self, index: int):
        self.index = index
        self.pending: Dict[int, Pending] = {}
        #: Acquires given up while in flight: a grant answered to one of
        #: them is released.
        self.abandoned: Set[int] = set()
        #: When something was last heard on it.
        self.heard = float("-inf")
        #: False once half-closed, killed or ended: nothing more is written.
        self.writable = True
        #: Its replica is no longer the one calls go to: no new request.
        self.retired = False
        self.ended = False
        #: The error its requests fail with when this client ended it.
        self.killed_with: Optional[StreamError] = None
        #: Called (with the error, or None) when it ends or is retired.
        self.watchers: List[Callable[[Optional[BaseException]], None]] = []

    def write(self, request: pb.SessionRequest) -> None:
        raise NotImplementedError

    def half_close(self) -> None:
        raise NotImplementedError

    def kill(self) -> None:
        raise NotImplementedError

    def backlog(self) -> int:
        raise NotImplementedError


class _NoLock:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class SessionBase:
    """The requests in flight on a client's Session streams: one current
    stream (to the replica calls go to), opened when a request needs it;
    older ones that still answer. Thread-safe when the subclass gives a
    real ``_lock``; every change happens under it, and the futures are
    settled under it too (their callbacks only wake someone up)."""

    _lock = _NoLock()

    def __init__(self, brokers: Brokers):
        self._brokers = brokers
        self._ids = itertools.count(1)
        # Replicas that answered the Session RPC with UNIMPLEMENTED.
        self._unsupported: Set[int] = set()
        self._current: Optional[Stream] = None
        self._streams: Set[Stream] = set()
        self._closed = False
        #: Streams opened so far (for tests and logs).
        self.opened = 0

    # -- what the subclasses provide -----------------------------------------

    def _open(self, stub, index: int) -> Stream:
        raise NotImplementedError

    def _new_pending(self, stream: Stream, id: int, kind: str) -> Pending:
        raise NotImplementedError

    def _arm(self, pending: Pending, timeout: float) -> None:
        """Fails ``pending`` locally (DEADLINE_EXCEEDED) after ``timeout``."""
        raise NotImplementedError

    def _release_late(self, lease: pb.Lease) -> None:
        """Releases, in the background, a grant nobody waits for."""
        raise NotImplementedError

    # -- requests ------------------------------------------------------------

    def usable(self) -> bool:
        """Whether requests go on the session now: not closed, and the
        replica calls go to has not refused it."""
        return not self._closed and self._brokers.current()[0] not in self._unsupported

    def submit(self, kind: str, message, timeout: Optional[float]) -> Pending:
        """Sends one request (``kind`` names the SessionRequest field) on
        the current stream, opening it if need be; ``timeout`` (seconds,
        None for none) bounds it on the broker (``timeout_ms``) and here."""
        with self._lock:
            if self._closed:
                raise LeaseholdError("the client is closed")
            pending = self._send(self._stream(), kind, message, timeout)
        if timeout is not None:
            self._arm(pending, timeout + GRACE)
        return pending

    def _stream(self) -> Stream:
        """The stream to the replica calls go to now (under the lock)."""
        index, stub = self._brokers.current()
        stream = self._current
        if stream is not None and stream.writable and not stream.retired and stream.index == index:
            return stream
        if stream is not None:
            self._retire(stream)
        stream = self._current = self._open(stub, index)
        self._streams.add(stream)
        self.opened += 1
        log.debug("opened Session stream %d to %s", self.opened, self._brokers.targets[index])
        return stream

    def _send(self, stream: Stream, kind: str, message, timeout: Optional[float]) -> Pending:
        id = next(self._ids)
        pending = self._new_pending(stream, id, kind)
        pending.session = self
        stream.pending[id] = pending
        timeout_ms = 0 if timeout is None else max(1, int(round(timeout * 1000)))
        stream.write(pb.SessionRequest(id=id, timeout_ms=timeout_ms, **{kind: message}))
        return pending

    def abandon(self, pending: Pending, error: StreamError) -> bool:
        """Gives up a request in flight: ``cancel`` on its stream, and
        ``error`` for whoever waits on it. False if it was answered."""
        with self._lock:
            stream = pending.stream
            if pending.done() or stream.pending.pop(pending.id, None) is None:
                return False
            if stream.writable:
                if pending.kind == "acquire":
                    stream.abandoned.add(pending.id)
                stream.write(pb.SessionRequest(id=next(self._ids), cancel=pb.SessionCancel(id=pending.id)))
            pending._settle(None, error)
            self._tidy(stream)
        return True

    def _expire(self, pending: Pending) -> None:
        # As grpc says of a unary call past its deadline.
        self.abandon(pending, StreamError(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded"))

    # -- the keeper's heartbeats ---------------------------------------------

    def attach(self, watcher: Callable[[Optional[BaseException]], None]) -> Stream:
        """The current stream, for heartbeats; ``watcher(error)`` is called
        once when it ends or is retired."""
        with self._lock:
            if self._closed:
                raise LeaseholdError("the client is closed")
            stream = self._stream()
            stream.watchers.append(watcher)
            return stream

    def detach(self, stream: Stream, watcher) -> None:
        with self._lock:
            if watcher in stream.watchers:
                stream.watchers.remove(watcher)

    def submit_on(self, stream: Stream, kind: str, message) -> Optional[Pending]:
        """A request without a timeout on ``stream`` if it still takes new
        ones; None if not (its end is on its way to its watchers)."""
        with self._lock:
            if self._closed or not stream.writable or stream.retired:
                return None
            return self._send(stream, kind, message, None)

    def stalled(self, stream: Stream, since: Optional[float]) -> bool:
        """The keeper found ``stream`` stuck: kills it (its requests fail
        UNAVAILABLE, the next opens a new stream) if nothing was heard on
        it since ``since``, the send time of the oldest heartbeat
        unanswered, more than :data:`STALL` ago. Returns whether it did."""
        with self._lock:
            now = time.monotonic()
            if not stream.writable or since is None or since > now - STALL or stream.heard >= since:
                return False
            stream.killed_with = StreamError(
                grpc.StatusCode.UNAVAILABLE,
                f"the Session stream stalled: nothing heard for {now - since:.1f} s; it was closed",
            )
            stream.writable = False
            if self._current is stream:
                self._current = None
            stream.kill()
            return True

    # -- what the stream's reader reports ------------------------------------

    def _answered(self, stream: Stream, response: pb.SessionResponse) -> None:
        result, error = _outcome(response)
        late = None
        with self._lock:
            stream.heard = time.monotonic()
            pending = stream.pending.pop(response.id, None)
            if pending is not None:
                pending._settle(result, error)
            elif response.id in stream.abandoned:
                stream.abandoned.discard(response.id)
                if isinstance(result, pb.AcquireResponse):
                    late = result.lease
            self._tidy(stream)
        if late is not None:
            self._release_late(late)

    def _ended(self, stream: Stream, error: Optional[BaseException]) -> None:
        """The stream ended, ``error`` None if with OK."""
        with self._lock:
            stream.ended = True
            stream.writable = False
            self._streams.discard(stream)
            if self._current is stream:
                self._current = None
            if stream.killed_with is not None:
                error = stream.killed_with
            elif error is not None and unsupported(error):
                self._unsupported.add(stream.index)
                log.info(
                    "broker %s does not know the Session stream: unary calls and KeepAlive there",
                    self._brokers.targets[stream.index],
                )
            elif error is not None:
                code = error.code() if hasattr(error, "code") else None
                log.debug("Session stream to %s ended: %s", self._brokers.targets[stream.index], code)
            failure = error or StreamError(grpc.StatusCode.UNAVAILABLE, "the Session stream ended before the answer")
            for pending in stream.pending.values():
                pending._settle(None, failure)
            stream.pending.clear()
            watchers, stream.watchers = stream.watchers, []
        for watcher in watchers:
            watcher(error)

    def _retire(self, stream: Stream) -> None:
        """Its replica is no longer the one calls go to (under the lock)."""
        stream.retired = True
        watchers, stream.watchers = stream.watchers, []
        for watcher in watchers:
            watcher(None)
        self._tidy(stream)

    def _tidy(self, stream: Stream) -> None:
        """Half-closes a retired stream once nothing waits on it."""
        if stream.retired and stream.writable and not stream.pending:
            stream.writable = False
            stream.half_close()

    def _closing(self) -> List[Stream]:
        """Marks the session closed: its waiting Acquires are cancelled (the
        broker answers them), every stream is half-closed. Returns the
        streams to wait for."""
        with self._lock:
            self._closed = True
            self._current = None
            streams = list(self._streams)
            for stream in streams:
                if not stream.writable:
                    continue
                for pending in stream.pending.values():
                    if pending.kind == "acquire":
                        stream.write(pb.SessionRequest(id=next(self._ids), cancel=pb.SessionCancel(id=pending.id)))
                stream.writable = False
                stream.half_close()
            return streams

    def _kill(self, stream: Stream) -> None:
        with self._lock:
            if stream.ended:
                return
            stream.killed_with = _closed()
            stream.writable = False
            stream.kill()


class Beats:
    """The keeper's stream (``_keepcore.Stream``) on the Session stream: its
    heartbeats are requests of the session; its answers, and the stream's
    end (or retirement), reach the keeper as the core's events, through
    ``post`` (the inbox's put)."""

    def __init__(self, session: SessionBase, gen: int, post: Callable[[object], None]):
        self.gen = gen
        self._session = session
        self._post = post
        self._lock = threading.Lock()
        self._gone = False
        self._beats: List[Pending] = []
        self._stream = session.attach(self._end)
        self.index = self._stream.index

    def send(self, request: pb.KeepAliveRequest) -> None:
        pending = self._session.submit_on(self._stream, "heartbeat", request)
        if pending is None:
            return  # the stream is going: the keeper hears it from the watcher
        with self._lock:
            self._beats = [p for p in self._beats if not p.done()]
            self._beats.append(pending)
        pending.add_done_callback(self._answered)

    def _answered(self, pending: Pending) -> None:
        error = pending.exception()
        if error is not None:
            self._end(error)
            return
        with self._lock:
            if self._gone:
                return
        self._post(kc.Answered(self.gen, pending.result()))

    def _end(self, error: Optional[BaseException]) -> None:
        with self._lock:
            if self._gone:
                return
            self._gone = True
        self._post(kc.StreamEnded(self.gen, self.index, error))

    def backlog(self) -> int:
        return self._stream.backlog()

    def _leave(self) -> List[Pending]:
        with self._lock:
            self._gone = True
            beats, self._beats = [p for p in self._beats if not p.done()], []
        self._session.detach(self._stream, self._end)
        return beats

    def half_close(self) -> None:
        """The keeper is done with it (no lease left, or it ended): the
        session stream goes on for the client's other requests."""
        self._leave()

    def cancel(self) -> None:
        """The keeper found it stuck (or stops): the stream is closed if it
        heard nothing since the oldest heartbeat unanswered; else only
        those heartbeats are given up."""
        beats = self._leave()
        since = min((p.sent for p in beats), default=None)
        if not self._session.stalled(self._stream, since):
            for pending in beats:
                pending.cancel()


# -- threads and grpc's blocking API -------------------------------------------


class _SyncPending(Pending):
    """A request in flight, as the future grpc's ``.future()`` calls give."""

    def __init__(self, stream: Stream, id: int, kind: str):
        super().__init__(stream, id, kind)
        self._event = threading.Event()
        self._result = None
        self._error: Optional[BaseException] = None
        self._callbacks: List[Callable[[Pending], None]] = []
        self._cblock = threading.Lock()

    def _settle(self, result, error) -> None:
        with self._cblock:
            if self._event.is_set():
                return
            self._result, self._error = result, error
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            try:
                callback(self)
            except Exception:  # pragma: no cover - a bug
                log.exception("Session request callback raised")

    def done(self) -> bool:
        return self._event.is_set()

    def add_done_callback(self, fn: Callable[[Pending], None]) -> None:
        with self._cblock:
            if not self._event.is_set():
                self._callbacks.append(fn)
                return
        fn(self)

    def exception(self, timeout: Optional[float] = None):
        self._event.wait(timeout)
        return self._error

    def result(self, timeout: Optional[float] = None):
        if not self._event.wait(timeout):
            raise grpc.FutureTimeoutError()
        if self._error is not None:
            raise self._error
        return self._result


class _SyncStream(Stream):
    """One Session call: requests fed from a queue to grpc's consuming
    thread, answers read by a thread of its own."""

    def __init__(self, session: "Session", stub, index: int, metadata):
        super().__init__(index)
        self._requests: "queue.Queue[Optional[pb.SessionRequest]]" = queue.Queue()
        self.done = threading.Event()
        self._call = stub.Session(self._iterate(), metadata=metadata)
        threading.Thread(target=self._read, args=(session,), name="leasehold-session", daemon=True).start()

    def _iterate(self):
        while True:
            request = self._requests.get()
            if request is None:
                return  # half-close
            yield request

    def _read(self, session: "Session") -> None:
        error: Optional[BaseException] = None
        try:
            for response in self._call:
                session._answered(self, response)
        except grpc.RpcError as e:
            error = e
        except Exception as e:  # pragma: no cover - defensive
            log.exception("Session stream reader failed")
            error = e
        finally:
            # Unblock grpc's request-consuming thread, whatever happened.
            self._requests.put(None)
        try:
            session._ended(self, error)
        finally:
            self.done.set()

    def write(self, request: pb.SessionRequest) -> None:
        self._requests.put(request)

    def half_close(self) -> None:
        self._requests.put(None)

    def kill(self) -> None:
        self._requests.put(None)
        self._call.cancel()

    def backlog(self) -> int:
        return self._requests.qsize()


class _Deadlines:
    """One thread that fails requests past their local deadline (rather
    than a timer thread per request)."""

    def __init__(self, expire: Callable[[Pending], None]):
        self._expire = expire
        self._cv = threading.Condition()
        self._heap: List[Tuple[float, int, Pending]] = []
        self._thread: Optional[threading.Thread] = None
        self._stopped = False

    def add(self, pending: Pending, timeout: float) -> None:
        with self._cv:
            if self._stopped:
                return
            heapq.heappush(self._heap, (time.monotonic() + timeout, pending.id, pending))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="leasehold-deadlines", daemon=True)
                self._thread.start()
            self._cv.notify()

    def stop(self) -> None:
        with self._cv:
            self._stopped = True
            self._heap.clear()
            self._cv.notify()

    def _run(self) -> None:
        while True:
            with self._cv:
                while True:
                    if self._stopped:
                        return
                    # Answered ones go without waiting for their time.
                    while self._heap and self._heap[0][2].done():
                        heapq.heappop(self._heap)
                    now = time.monotonic()
                    if self._heap and self._heap[0][0] <= now:
                        due = heapq.heappop(self._heap)[2]
                        break
                    self._cv.wait(None if not self._heap else min(self._heap[0][0] - now, 1.0))
            self._expire(due)


class Session(SessionBase):
    """The thread client's Session streams (see :class:`SessionBase`)."""

    def __init__(self, brokers: Brokers):
        super().__init__(brokers)
        self._lock = threading.RLock()  # type: ignore[assignment]
        self._deadlines = _Deadlines(self._expire)

    def _open(self, stub, index: int) -> Stream:
        return _SyncStream(self, stub, index, self._brokers.metadata)

    def _new_pending(self, stream: Stream, id: int, kind: str) -> Pending:
        return _SyncPending(stream, id, kind)

    def _arm(self, pending: Pending, timeout: float) -> None:
        self._deadlines.add(pending, timeout)

    def _release_late(self, lease: pb.Lease) -> None:
        request = pb.ReleaseRequest(name=lease.name, owner_token=lease.owner_token)

        def release() -> None:
            try:
                self.call("release", request, 5.0)
            except Exception:
                pass

        threading.Thread(target=release, name="leasehold-release", daemon=True).start()

    def call(self, kind: str, message, timeout: float):
        """One request and its answer: on the session while the replica
        serves it, else the unary call; moving on to the next replica while
        requests are never read (as ``Brokers.call``). Raises
        ``grpc.RpcError``."""
        attempts = len(self._brokers)
        while True:
            if not self.usable():
                return self._brokers.call(UNARY[kind], message, timeout)
            pending = self.submit(kind, message, timeout)
            try:
                return pending.result()
            except grpc.RpcError as e:
                if unsupported(e):
                    continue  # that replica now gets unary calls
                if attempts > 1 and never_read(e):
                    self._brokers.move_on(pending.index, "unreachable" if not_connected(e) else "shutting down")
                    attempts -= 1
                    continue
                raise

    def close(self, timeout: float = 2.0) -> None:
        """Cancels the waiting Acquires, half-closes the streams and waits
        (up to ``timeout``) for their ends; kills what is left."""
        streams = self._closing()
        end = time.monotonic() + timeout
        for stream in streams:
            assert isinstance(stream, _SyncStream)
            if not stream.done.wait(max(0.0, end - time.monotonic())):
                self._kill(stream)
        self._deadlines.stop()


# -- asyncio and grpc.aio ------------------------------------------------------


class _AioPending(Pending):
    """A request in flight, with an asyncio future (``.future``)."""

    def __init__(self, stream: Stream, id: int, kind: str):
        super().__init__(stream, id, kind)
        self.future: "asyncio.Future" = asyncio.get_running_loop().create_future()
        # Retrieved, so that a failure nobody awaits is not reported as
        # "never retrieved" (the caller gave up on it).
        self.future.add_done_callback(lambda f: f.cancelled() or f.exception())
        self.timer: Optional[asyncio.TimerHandle] = None

    def _settle(self, result, error) -> None:
        if self.timer is not None:
            self.timer.cancel()
        if self.future.done():
            return
        if error is not None:
            self.future.set_exception(error)
        else:
            self.future.set_result(result)

    def done(self) -> bool:
        return self.future.done()

    def add_done_callback(self, fn: Callable[[Pending], None]) -> None:
        self.future.add_done_callback(lambda _: fn(self))

    def exception(self):
        if self.future.cancelled():
            return StreamError(grpc.StatusCode.CANCELLED, "Locally cancelled")
        return self.future.exception()

    def result(self):
        return self.future.result()


class _AioStream(Stream):
    """One Session call: a writer task fed from a queue, a reader task."""

    def __init__(self, session: "AioSession", stub, index: int, metadata):
        super().__init__(index)
        self._call = stub.Session(metadata=metadata)
        self._requests: "asyncio.Queue[Optional[pb.SessionRequest]]" = asyncio.Queue()
        self._writer = asyncio.ensure_future(self._write())
        self.reader = asyncio.ensure_future(self._read(session))

    async def _write(self) -> None:
        try:
            # Nothing is written before the broker answered the call's
            # headers: a write racing with a refusal (UNIMPLEMENTED from a
            # broker without Session, answered with trailers only) makes
            # grpc.aio record the call's status as INTERNAL "Internal error
            # from Core" (a failed SendMessageOperation) in place of the
            # refusal, and the client took an old broker for a broken one
            # (a loaded CI run, grpcio 1.85; about 1 run in 20 with two CPU
            # hogs). A refused call is done once its headers are in.
            await self._call.initial_metadata()
            if self._call.done():
                return
            while True:
                request = await self._requests.get()
                if request is None:
                    await self._call.done_writing()
                    return
                await self._call.write(request)
        except Exception:
            return  # the call ended: the reader says how

    async def _read(self, session: "AioSession") -> None:
        error: Optional[BaseException] = None
        try:
            while True:
                response = await self._call.read()
                if response is grpc.aio.EOF:
                    break
                session._answered(self, response)
            code = await self._call.code()
            if code != grpc.StatusCode.OK:
                details = await self._call.details() or ""
                trailing = await self._call.trailing_metadata()
                error = StreamError(code, details, detail=detail_from_trailers(trailing))
        except asyncio.CancelledError:
            error = StreamError(grpc.StatusCode.CANCELLED, "Locally cancelled")
        except grpc.RpcError as e:
            error = e
        except Exception as e:  # pragma: no cover - defensive
            log.exception("Session stream reader failed")
            error = e
        self._writer.cancel()
        session._ended(self, error)

    def write(self, request: pb.SessionRequest) -> None:
        self._requests.put_nowait(request)

    def half_close(self) -> None:
        self._requests.put_nowait(None)

    def kill(self) -> None:
        self._call.cancel()
        self._writer.cancel()

    def backlog(self) -> int:
        return self._requests.qsize()


class AioSession(SessionBase):
    """The asyncio client's Session streams (see :class:`SessionBase`): one
    event loop runs it all, so it needs no lock."""

    def __init__(self, brokers: Brokers, spawn: Callable):
        super().__init__(brokers)
        # Starts a background task the client keeps track of.
        self._spawn = spawn

    def _open(self, stub, index: int) -> Stream:
        return _AioStream(self, stub, index, self._brokers.metadata)

    def _new_pending(self, stream: Stream, id: int, kind: str) -> Pending:
        return _AioPending(stream, id, kind)

    def _arm(self, pending: Pending, timeout: float) -> None:
        assert isinstance(pending, _AioPending)
        pending.timer = asyncio.get_running_loop().call_later(timeout, self._expire, pending)

    def _release_late(self, lease: pb.Lease) -> None:
        request = pb.ReleaseRequest(name=lease.name, owner_token=lease.owner_token)

        async def release() -> None:
            try:
                await self.call("release", request, 5.0)
            except Exception:
                pass

        self._spawn(release())

    async def call(self, kind: str, message, timeout: float):
        """As :meth:`Session.call`; a cancelled caller cancels its request."""
        attempts = len(self._brokers)
        while True:
            if not self.usable():
                return await self._brokers.acall(UNARY[kind], message, timeout)  # type: ignore[attr-defined]
            pending = self.submit(kind, message, timeout)
            assert isinstance(pending, _AioPending)
            try:
                return await asyncio.shield(pending.future)
            except asyncio.CancelledError:
                pending.cancel()
                raise
            except grpc.RpcError as e:
                if unsupported(e):
                    continue
                if attempts > 1 and never_read(e):
                    self._brokers.move_on(pending.index, "unreachable" if not_connected(e) else "shutting down")
                    attempts -= 1
                    continue
                raise

    async def close(self, timeout: float = 2.0) -> None:
        """As :meth:`Session.close`."""
        streams = self._closing()
        readers = [s.reader for s in streams if isinstance(s, _AioStream)]
        if readers:
            await asyncio.wait(readers, timeout=timeout)
        for stream in streams:
            self._kill(stream)
        if readers:
            await asyncio.wait(readers, timeout=timeout)
