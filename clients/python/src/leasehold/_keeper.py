"""The keeper: one thread per Client that keeps all its leases alive over one
KeepAlive stream, notices losses, and reconnects when the stream breaks.

It follows the rules of the Rust client (clients/rust/src/keeper.rs):

* one heartbeat every third of the shortest TTL, naming every live lease;
* each renewal moves a lease's local deadline to (heartbeat *send* time +
  granted TTL - safety margin), so latency can only make it early;
* a lease is lost when the broker answers LOST (or REJECTED), or when its
  local deadline passes without a confirmation, whatever the broker says
  later (the keeper wakes up at the nearest deadline to notice that);
* when the stream breaks or stalls, it opens a new one (with jittered
  backoff, never longer than a heartbeat interval) and resumes the leases by
  owner token, which works as long as they have not expired;
* with several broker replicas, a stream that could not connect moves the
  client on to the next replica, where the leases resume (any replica can
  renew them: they share the store);
* a lease past its local deadline is released in the background, so the
  next holder need not wait for the broker-side TTL.

Everything the keeper reacts to arrives through one inbox queue (stream
responses and ends, new and dropped leases, close), so the heartbeat state is
touched by one thread only. The inbox is a SimpleQueue, whose put() is safe
from ``__del__`` methods.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
from typing import Dict, List, Optional, Tuple

import grpc

from ._brokers import Brokers, not_connected
from ._lease import _Held, run_callbacks
from ._proto import leasehold_pb2 as pb
from .errors import LossReason

log = logging.getLogger("leasehold")

MIN_BACKOFF = 0.05
MAX_BACKOFF = 2.0
#: Heartbeats never come closer together than this, whatever the TTL.
MIN_INTERVAL = 0.05
#: Beats queued but not yet taken by gRPC beyond which the stream counts as
#: stuck.
MAX_BACKLOG = 4
#: Most leases one heartbeat names: the broker's default --max-stream-leases,
#: which keeps the largest heartbeat well inside its default
#: --max-message-size. More leases go in several heartbeats per beat.
HEARTBEAT_LEASES = 1000


def beat_interval(leases: List[_Held]) -> float:
    """A third of the shortest TTL."""
    if not leases:
        return 1.0
    return max(min(h.ttl for h in leases) / 3.0, MIN_INTERVAL)


def jitter(d: float) -> float:
    """``d`` scaled by a random factor in [0.5, 1.5), so clients that lost
    the same broker do not reconnect in lockstep."""
    return d * (0.5 + random.random())


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
                callbacks = held.mark_lost(reason, "no renewal was confirmed before the local deadline")
                log.warning("lease %r lost: %s", held.name, reason)
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
        pending: Dict[int, Tuple[float, List[_Held]]] = {}
        next_beat = 0.0
        reconnect_at = 0.0
        backoff = MIN_BACKOFF

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
                    interval = beat_interval(live)
                    oldest = min((sent for sent, _ in pending.values()), default=None)
                    stalled = oldest is not None and now - oldest > max(2 * interval, 1.0)
                    if stalled or stream.backlog() > MAX_BACKLOG * -(-len(live) // HEARTBEAT_LEASES):
                        log.debug("KeepAlive stream %d stalled; reconnecting", gen)
                        stream.cancel()
                        stream, gen = None, gen + 1
                        pending.clear()
                        reconnect_at = now
                        continue
                    # Several heartbeats when the leases are more than one
                    # may name (the broker's --max-stream-leases).
                    for start in range(0, len(live), HEARTBEAT_LEASES):
                        chunk = live[start:start + HEARTBEAT_LEASES]
                        seq += 1
                        stream.send(
                            pb.KeepAliveRequest(
                                seq=seq,
                                leases=[pb.LeaseRef(name=h.name, owner_token=h.token, ttl_ms=0) for h in chunk],
                            )
                        )
                        pending[seq] = (now, chunk)
                    next_beat = now + interval

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
                    next_beat = min(next_beat, time.monotonic() + beat_interval(self.snapshot()))
            elif kind == "dropped":
                held = event[1]
                if not held.released:
                    held.released = True
                    self.forget(held)
                    if held.loss() is None or held.loss() is LossReason.DEADLINE_PASSED:
                        self.release_in_background(held.name, held.token)
            elif kind == "response":
                if event[1] == gen:
                    backoff = MIN_BACKOFF
                    self._apply(pending, event[2])
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
                    delay = min(jitter(backoff), beat_interval(self.snapshot()))
                    reconnect_at = time.monotonic() + delay
                    backoff = min(backoff * 2, MAX_BACKOFF)

    def _apply(self, pending: Dict[int, Tuple[float, List[_Held]]], response: pb.KeepAliveResponse) -> None:
        entry = pending.pop(response.seq, None)
        if entry is None:
            return
        # Answers come in order: older heartbeats still pending got none.
        for old in [s for s in pending if s < response.seq]:
            del pending[old]
        sent, leases = entry
        State = pb.LeaseStatus.State
        for held, status in zip(leases, response.leases):
            if status.name != held.name or held.released:
                continue
            if status.state == State.Value("STATE_ALIVE"):
                held.renewed(sent, status.ttl_ms)
                continue
            if status.state == State.Value("STATE_REJECTED"):
                log.warning("broker rejected lease %r: %s", held.name, status.message)
                reason = LossReason.EXPIRED
            elif status.state == State.Value("STATE_LOST"):
                reason = self._loss_reason(held, status.reason)
            else:  # UNCONFIRMED (the store did not answer), UNSPECIFIED
                continue
            callbacks = held.mark_lost(reason, status.message)
            self.forget(held)
            log.warning("lease %r lost: %s (%s)", held.name, reason, status.message)
            self._fire(callbacks, reason, held.name)

    @staticmethod
    def _loss_reason(held: _Held, reason: int) -> LossReason:
        if reason == pb.LOSS_REASON_NOT_OWNER:
            return LossReason.NOT_OWNER
        if reason == pb.LOSS_REASON_STORE_LOST:
            return LossReason.STORE_LOST
        if reason == pb.LOSS_REASON_REVOKED:
            return LossReason.REVOKED
        # EXPIRED or unspecified, but gone before our own (early) deadline:
        # it cannot have expired, so the store lost it. The broker cannot
        # always tell (e.g. on a new stream's first heartbeat); we can.
        if time.monotonic() < held.deadline:
            return LossReason.STORE_LOST
        return LossReason.EXPIRED
