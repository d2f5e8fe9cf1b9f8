"""The keeper: one thread per Client that keeps all its leases alive over one
stream (the client's Session stream, or a KeepAlive stream when the session
is off or the broker does not know it), notices losses, and reconnects when
the stream breaks.

What to do and when is decided by _keepcore.KeeperCore (the rules of the
Rust client, clients/rust/src/keeper.rs, set out in _heartbeat.py), which
the asyncio keeper (_aio.py) drives too; this module is its I/O with threads
and grpc's blocking API. With several broker replicas, a stream that could
not connect moves the client on to the next replica, where the leases
resume (any replica can renew them: they share the store). A lease past its
local deadline is released in the background, so the next holder need not
wait for the broker-side TTL.

Everything the keeper reacts to arrives through one inbox queue as the
core's events (stream answers and ends, new and dropped leases, close), so
the core's events are handled by one thread only. The inbox is a
SimpleQueue, whose put() is safe from ``__del__`` methods.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import List, Optional

import grpc

from . import _keepcore as kc
from ._advice import AdviceCallback, TtlAdvice
from ._brokers import Brokers
from ._lease import _Held, run_callbacks
from ._proto import leasehold_pb2 as pb
from ._session import Beats, Session
from .errors import LeaseholdError, LossReason

log = logging.getLogger("leasehold")


class _Stream:
    """One KeepAlive call, to the replica calls go to when it opens:
    requests are fed from a queue, responses are read by a thread of its
    own and posted to the keeper's inbox, tagged with the stream's
    generation so that news from an abandoned stream is ignored."""

    def __init__(self, brokers: Brokers, gen: int, inbox: "queue.SimpleQueue"):
        self.gen = gen
        self.index, stub = brokers.current()
        self._requests: "queue.Queue[Optional[pb.KeepAliveRequest]]" = queue.Queue()
        self._call = stub.KeepAlive(self._iterate(), metadata=brokers.metadata)
        self._reader = threading.Thread(
            target=self._read, args=(inbox,), name=f"leasehold-keepalive-{gen}", daemon=True
        )
        self._reader.start()

    def _iterate(self):
        while True:
            request = self._requests.get()
            if request is None:
                return  # half-close
            yield request

    def _read(self, inbox: "queue.SimpleQueue") -> None:
        error: Optional[BaseException] = None
        try:
            for response in self._call:
                inbox.put(kc.Answered(self.gen, response))
        except grpc.RpcError as e:
            error = e
        except Exception as e:  # pragma: no cover - defensive
            error = e
        finally:
            # Unblock gRPC's request-consuming thread, whatever happened.
            self._requests.put(None)
        inbox.put(kc.StreamEnded(self.gen, self.index, error))

    def send(self, request: pb.KeepAliveRequest) -> None:
        self._requests.put(request)

    def backlog(self) -> int:
        """Heartbeats gRPC has not yet taken (the core's stall rule)."""
        return self._requests.qsize()

    def half_close(self) -> None:
        """Ends the stream cleanly: no lease is left to keep."""
        self._requests.put(None)

    def cancel(self) -> None:
        self._requests.put(None)
        self._call.cancel()


class Keeper(kc.Driver):
    """One thread per Client that keeps all its leases alive: the I/O, with
    threads and grpc's blocking API, of the core that the asyncio keeper
    drives too (_keepcore.KeeperCore)."""

    def __init__(
        self, brokers: Brokers, session: Optional[Session] = None, on_ttl_advice: Optional[AdviceCallback] = None
    ):
        # The replicas, with the bearer token's metadata, if any: sent with
        # the stream and the background releases (never logged).
        self._brokers = brokers
        # The client's Session stream, which carries the heartbeats while
        # the broker knows it (None: KeepAlive streams only).
        self._session = session
        self._on_ttl_advice = on_ttl_advice
        self._inbox: "queue.SimpleQueue" = queue.SimpleQueue()
        # The core is not thread-safe and application threads use its lease
        # registry: every call into it holds this lock. The core never
        # blocks, so the lock is never held across I/O or a callback.
        self._lock = threading.Lock()
        self._core = kc.KeeperCore()
        self._stream: Optional[_Stream] = None  # the keeper thread's alone
        self._thread = threading.Thread(target=self._run, name="leasehold-keeper", daemon=True)
        self._thread.start()

    # -- called from application threads -------------------------------------

    def add(self, held: _Held) -> None:
        with self._lock:
            self._core.add(held)
        self._inbox.put(kc.LeaseAdded())

    def forget(self, held: _Held) -> None:
        with self._lock:
            self._core.forget(held)

    def dropped(self, held: _Held) -> None:
        """A Lease was garbage-collected unreleased (only a queue put: no
        lock, since ``__del__`` may run on a thread that holds it)."""
        self._inbox.put(kc.LeaseDropped(held))

    def snapshot(self) -> List[_Held]:
        with self._lock:
            return self._core.leases()

    @property
    def advice(self) -> Optional[TtlAdvice]:
        with self._lock:
            return self._core.advice

    def close(self, timeout: float = 5.0) -> None:
        self._inbox.put(kc.Close())
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def release_in_background(self, name: str, token: str) -> None:
        """Best effort, on a thread of its own, so nothing waits for it."""

        request = pb.ReleaseRequest(name=name, owner_token=token)

        def release() -> None:
            try:
                if self._session is not None:
                    self._session.call("release", request, 5.0)
                else:
                    self._brokers.call("Release", request, timeout=5)
            except Exception:
                pass

        threading.Thread(target=release, name="leasehold-release", daemon=True).start()

    # -- the keeper thread ---------------------------------------------------

    def _run(self) -> None:
        try:
            self._loop()
        except Exception:  # pragma: no cover - a bug; leases then expire
            log.exception("leasehold keeper thread crashed; leases will no longer be renewed")

    def _loop(self) -> None:
        event: kc.Event = kc.TimerFired()
        while True:
            backlog = self._backlog()
            with self._lock:
                actions = self._core.handle(event, time.monotonic(), backlog)
            sleep = self._perform(actions)
            if sleep is None:
                return
            try:
                event = self._inbox.get(timeout=sleep.timeout(time.monotonic()))
            except queue.Empty:
                event = kc.TimerFired()

    def _open(self, gen: int) -> kc.Stream:
        """Heartbeats on the Session stream while its replica knows it;
        else a KeepAlive stream."""
        if self._session is not None and self._session.usable():
            try:
                return Beats(self._session, gen, self._inbox.put)
            except LeaseholdError:
                pass  # closed meanwhile
        return _Stream(self._brokers, gen, self._inbox)

    def _fire(self, callbacks: list, reason: LossReason, name: str) -> None:
        """Runs the lost callbacks on a short-lived thread, so that a slow
        one cannot delay the heartbeats of other leases."""
        if callbacks:
            threading.Thread(
                target=run_callbacks, args=(callbacks, reason, name), name="leasehold-lost", daemon=True
            ).start()

    def _advise(self, advice: TtlAdvice) -> None:
        """Runs ``on_ttl_advice`` on a short-lived thread, as lost callbacks."""
        callback = self._on_ttl_advice
        if callback is None:
            return

        def run() -> None:
            try:
                callback(advice)
            except Exception:
                log.exception("on_ttl_advice callback raised")

        threading.Thread(target=run, name="leasehold-advice", daemon=True).start()
