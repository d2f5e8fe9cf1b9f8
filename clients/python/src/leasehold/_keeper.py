"""The keeper: one thread per Client that keeps all its leases alive over one
KeepAlive stream, notices losses, and reconnects when the stream breaks.

It follows the rules of the Rust client (clients/rust/src/keeper.rs), set
out in _heartbeat.py and shared with the asyncio keeper (_aio.py). With
several broker replicas, a stream that could not connect moves the client
on to the next replica, where the leases resume (any replica can renew
them: they share the store). A lease past its local deadline is released in
the background, so the next holder need not wait for the broker-side TTL.

Everything the keeper reacts to arrives through one inbox queue (stream
responses and ends, new and dropped leases, close), so the heartbeat state is
touched by one thread only. The inbox is a SimpleQueue, whose put() is safe
from ``__del__`` methods.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Dict, List, Optional

import grpc

from . import _heartbeat as hb
from ._brokers import Brokers, not_connected
from ._lease import _Held, run_callbacks
from ._proto import leasehold_pb2 as pb
from .errors import LossReason

log = logging.getLogger("leasehold")


class _Stream:
    """One KeepAlive call, to the replica at ``index``: requests are fed
    from a queue, responses are read by a thread of its own and posted to the
    keeper's inbox, tagged with the stream's generation so that news from an
    abandoned stream is ignored."""

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
                inbox.put(("response", self.gen, response))
        except grpc.RpcError as e:
            error = e
        except Exception as e:  # pragma: no cover - defensive
            error = e
        finally:
            # Unblock gRPC's request-consuming thread, whatever happened.
            self._requests.put(None)
        inbox.put(("end", self.gen, error))

    def send(self, request: pb.KeepAliveRequest) -> None:
        self._requests.put(request)

    def backlog(self) -> int:
        return self._requests.qsize()

    def half_close(self) -> None:
        """Ends the stream cleanly: no lease is left to keep."""
        self._requests.put(None)

    def cancel(self) -> None:
        self._requests.put(None)
        self._call.cancel()


class Keeper:
    def __init__(self, brokers: Brokers):
        # The replicas, with the bearer token's metadata, if any: sent with
        # the stream and the background releases (never logged).
        self._brokers = brokers
        self._inbox: "queue.SimpleQueue" = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._leases: Dict[str, _Held] = {}  # by owner token
        self._thread = threading.Thread(target=self._run, name="leasehold-keeper", daemon=True)
        self._thread.start()

    # -- called from application threads -------------------------------------

    def add(self, held: _Held) -> None:
        with self._lock:
            self._leases[held.token] = held
        self._inbox.put(("added",))

    def forget(self, held: _Held) -> None:
        with self._lock:
            if self._leases.get(held.token) is held:
                del self._leases[held.token]

    def dropped(self, held: _Held) -> None:
        """A Lease was garbage-collected unreleased (only a queue put)."""
        self._inbox.put(("dropped", held))

    def snapshot(self) -> List[_Held]:
        with self._lock:
            return list(self._leases.values())

    def close(self, timeout: float = 5.0) -> None:
        self._inbox.put(("close",))
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def release_in_background(self, name: str, token: str) -> None:
        """Best effort, on a thread of its own, so nothing waits for it."""

        def release() -> None:
            try:
                self._brokers.call("Release", pb.ReleaseRequest(name=name, owner_token=token), timeout=5)
            except Exception:
                pass

        threading.Thread(target=release, name="leasehold-release", daemon=True).start()

    # -- the keeper thread ---------------------------------------------------

    def _live_leases(self) -> List[_Held]:
        """The registered leases still alive. Those whose deadline passed are
        marked lost (running their callbacks), forgotten and released."""
        live = []
        for held in self.snapshot():
            reason = held.loss()
            if reason is None:
                live.append(held)
                continue
            self.forget(held)
            if reason is LossReason.DEADLINE_PASSED:
                callbacks, reason = hb.expired(held)
                self._fire(callbacks, reason, held.name)
                self.release_in_background(held.name, held.token)
        return live

    @staticmethod
    def _fire(callbacks, reason: LossReason, name: str) -> None:
        if callbacks:
            threading.Thread(
                target=run_callbacks, args=(callbacks, reason, name), name="leasehold-lost", daemon=True
            ).start()

    def _run(self) -> None:
        try:
            self._loop()
        except Exception:  # pragma: no cover - a bug; leases then expire
            log.exception("leasehold keeper thread crashed; leases will no longer be renewed")

    def _loop(self) -> None:
        stream: Optional[_Stream] = None
        gen = 0
        seq = 0
        # Heartbeats awaiting their answer: seq -> (send time, leases in order).
        pending: hb.Pending = {}
        next_beat = 0.0
        reconnect_at = 0.0
        backoff = hb.MIN_BACKOFF

        while True:
            now = time.monotonic()
            live = self._live_leases()

            if stream is None and live and now >= reconnect_at:
                gen += 1
                pending.clear()
                stream = _Stream(self._brokers, gen, self._inbox)
                log.debug(
                    "opening KeepAlive stream %d to %s for %d lease(s)",
                    gen, self._brokers.targets[stream.index], len(live),
                )
                next_beat = now  # beat at once: after a reconnection this resumes the leases

            if stream is not None and now >= next_beat:
                if not live:
                    stream.half_close()  # a clean end, not a loss
                    stream, gen = None, gen + 1
                    pending.clear()
                else:
                    if hb.stuck(pending, stream.backlog(), live, now):
                        log.debug("KeepAlive stream %d stalled; reconnecting", gen)
                        stream.cancel()
                        stream, gen = None, gen + 1
                        pending.clear()
                        reconnect_at = now
                        continue
                    seq, requests = hb.heartbeats(live, seq, now, pending)
                    for request in requests:
                        stream.send(request)
                    next_beat = now + hb.beat_interval(live)

            # Sleep until the next thing to do: a heartbeat, a reconnection,
            # or the nearest local deadline (to report it lost on time).
            wake = float("inf")
            if live:
                wake = next_beat if stream is not None else reconnect_at
                wake = min([wake] + [h.deadline for h in live])
            timeout = None if wake == float("inf") else max(0.0, wake - time.monotonic())
            try:
                event = self._inbox.get(timeout=timeout)
            except queue.Empty:
                continue

            kind = event[0]
            if kind == "close":
                if stream is not None:
                    stream.cancel()
                return
            if kind == "added":
                if stream is not None:
                    next_beat = min(next_beat, time.monotonic() + hb.beat_interval(self.snapshot()))
            elif kind == "dropped":
                held = event[1]
                if not held.released:
                    held.released = True
                    self.forget(held)
                    if held.loss() is None or held.loss() is LossReason.DEADLINE_PASSED:
                        self.release_in_background(held.name, held.token)
            elif kind == "response":
                if event[1] == gen:
                    backoff = hb.MIN_BACKOFF
                    for held, reason, callbacks in hb.apply(pending, event[2]):
                        self.forget(held)
                        self._fire(callbacks, reason, held.name)
            elif kind == "end":
                if event[1] == gen and stream is not None:
                    error = event[2]
                    if error is not None:
                        code = error.code() if hasattr(error, "code") else None
                        details = error.details() if hasattr(error, "details") else str(error)
                        log.debug("KeepAlive stream %d ended: %s %s", gen, code, details)
                        if not_connected(error):
                            # The replica cannot be reached: resume the
                            # leases on the next one (if any).
                            self._brokers.unreachable(stream.index)
                    stream.half_close()
                    stream, gen = None, gen + 1
                    pending.clear()
                    # Retry soon enough to resume the leases before their
                    # deadlines: never wait longer than a heartbeat interval.
                    delay = min(hb.jitter(backoff), hb.beat_interval(self.snapshot()))
                    reconnect_at = time.monotonic() + delay
                    backoff = min(backoff * 2, hb.MAX_BACKOFF)
