"""The keeper's decisions, without its I/O: one state machine that both
keepers drive, the thread of Client (_keeper.Keeper) and the task of
AsyncClient (_aio._Keeper).

Why a core without I/O: the two keepers were two copies of one loop, which
could only drift apart (they had begun to: the asyncio one did not log the
stream it opened, nor the code of the error that ended one), and that loop
could only be tested against a real broker, by waiting real TTLs. Here the
loop is a :class:`KeeperCore` that is handed *events* (a lease was added or
dropped, an answer arrived, the stream ended, the sleep ran out, close) with
the time they happened, and answers with *actions* (open a stream, send this
heartbeat, half-close or cancel the stream, move off this broker, mark this
lease lost, release this one, sleep until then, stop). A driver performs the
actions with its own I/O (threads and grpc, or tasks and grpc.aio) and feeds
back what happened; a unit test feeds events and reads actions, with a clock
of its own.

The core does change the leases it keeps where nobody is woken: a confirmed
renewal moves a deadline, a dropped lease is flagged released. Marking one
lost is an action instead (:class:`Lost`): it wakes whoever waits for the
loss (a thread, or a task of another loop) and hands over callbacks to run,
which is the driver's business.

The rules it applies are _heartbeat's (when to beat, what a beat names,
what an answer does, when a stream is stuck); this module adds the state
between events: the stream's generation, the heartbeats awaiting their
answer, the next beat, the backoff and the time of the next reconnection,
the round trip measured and not yet reported, and the broker's TTL advice
(_advice: the latest, and whether this stream's was told already).

A driver's loop is::

    event = TimerFired()
    while True:
        actions = core.handle(event, now(), backlog of the open stream)
        perform every action but the last, which is Sleep(until) or Stop()
        event = the next event from the inbox, or TimerFired() at `until`

What a driver does with each action is the same for both but for the
I/O itself (how a stream is opened, how a callback or a release runs), so
that part is here too: :class:`Driver`, which calls the driver's stream and
methods and does no I/O of its own.

Threads: the core is not thread-safe (as _core.Chain). The lease registry
(:meth:`KeeperCore.add`, :meth:`~KeeperCore.forget`,
:meth:`~KeeperCore.leases`) is used by the application too, so the thread
driver holds a lock around every call into the core; the asyncio driver
needs none (one event loop). The core never blocks and never calls out, so
that lock is never held across I/O or a user callback.
"""

from __future__ import annotations

import dataclasses
import logging
import random
from typing import Callable, Dict, List, Optional, Protocol, Union

from . import _heartbeat as hb
from ._advice import TtlAdvice, advice_of, round_trip_us
from ._brokers import Brokers, not_connected
from ._lease import DEADLINE_MESSAGE, _Held
from ._proto import leasehold_pb2 as pb
from .errors import LossReason

log = logging.getLogger("leasehold")


# -- events: what happened (the driver tells) --------------------------------


@dataclasses.dataclass(frozen=True)
class TimerFired:
    """The sleep the last :class:`Sleep` asked for ran out; also the event
    of a driver's first step (nothing happened yet: just look)."""


@dataclasses.dataclass(frozen=True)
class LeaseAdded:
    """A lease was registered (:meth:`KeeperCore.add`, from the application
    side). Registering is immediate, so that a close right after an acquire
    releases the lease; this event only wakes the keeper, whose next beat
    may have to come sooner (a shorter TTL)."""


@dataclasses.dataclass(frozen=True)
class LeaseDropped:
    """A lease handle was garbage-collected unreleased: the lease is
    released in the background, so a forgotten lease cannot hold its lock
    until its TTL (as the Rust client does on drop)."""

    held: _Held


@dataclasses.dataclass(frozen=True)
class Answered:
    """The stream of generation ``gen`` brought a KeepAliveResponse."""

    gen: int
    response: pb.KeepAliveResponse


@dataclasses.dataclass(frozen=True)
class StreamEnded:
    """The stream of generation ``gen``, opened to the replica at
    ``index``, ended: ``error`` None if the broker ended it cleanly, else
    the exception that ended it (a ``grpc.RpcError`` as a rule)."""

    gen: int
    index: int
    error: Optional[BaseException]


@dataclasses.dataclass(frozen=True)
class Close:
    """The client is closing: end the stream and stop."""


Event = Union[TimerFired, LeaseAdded, LeaseDropped, Answered, StreamEnded, Close]


# -- actions: what to do (the driver does it) --------------------------------


@dataclasses.dataclass(frozen=True)
class OpenStream:
    """Open a KeepAlive stream to the replica calls go to now
    (``Brokers.current()``), tagging what it brings with ``gen`` (news of
    an older generation is ignored); ``leases``: how many it will keep (for
    the driver's log). The stream is the current one until a
    :class:`HalfClose` or :class:`Cancel`."""

    gen: int
    leases: int


@dataclasses.dataclass(frozen=True)
class Send:
    """Send this heartbeat on the current stream (without blocking: a
    stream that does not take them shows it in its backlog)."""

    request: pb.KeepAliveRequest


@dataclasses.dataclass(frozen=True)
class HalfClose:
    """End the current stream cleanly and let it go: no lease is left to
    keep, or the broker's end of it is gone already."""


@dataclasses.dataclass(frozen=True)
class Cancel:
    """Cancel the current stream and let it go: it stalled, or the keeper
    stops."""


@dataclasses.dataclass(frozen=True)
class Unreachable:
    """The replica at ``index`` could not be connected to: move the client
    on to the next one (``Brokers.unreachable``), where the leases resume
    (any replica can renew them: they share the store)."""

    index: int


@dataclasses.dataclass(frozen=True)
class Lost:
    """Mark ``held`` lost (``_Held.mark_lost(reason, message)``, which wakes
    whoever waits for the loss) and run the callbacks that returns, the
    driver's way. The core has forgotten the lease already."""

    held: _Held
    reason: LossReason
    message: str


@dataclasses.dataclass(frozen=True)
class Release:
    """Release this lease in the background (best effort, nobody waits):
    it may still exist on the broker, and the next holder need not wait for
    its TTL."""

    name: str
    token: str


@dataclasses.dataclass(frozen=True)
class Sleep:
    """Wait for the next event until ``until`` (on the clock the events'
    times come from), then hand the core :class:`TimerFired`; ``None``:
    until the next event, however long. Always the last action of a step
    that does not stop."""

    until: Optional[float]

    def timeout(self, now: float) -> Optional[float]:
        """How long to wait from ``now`` (None: without end)."""
        return None if self.until is None else max(0.0, self.until - now)


@dataclasses.dataclass(frozen=True)
class Stop:
    """The keeper is done (after :class:`Close`): the driver ends its loop.
    The last action of such a step, and the only one of any step after."""


@dataclasses.dataclass(frozen=True)
class Advised:
    """The broker's answers on this stream began to carry TTL advice (the
    core logged it): call the application's ``on_ttl_advice``, the
    driver's way. Once per stream, as the warning: the latest advice is
    :attr:`KeeperCore.advice`."""

    advice: TtlAdvice


Action = Union[OpenStream, Send, HalfClose, Cancel, Unreachable, Lost, Release, Advised, Sleep, Stop]


class KeeperCore:
    """The state of one keeper between events, and what each event makes it
    do (see the module's docstring). ``rand``: the random numbers of the
    reconnection jitter, in [0, 1) (a test passes a fixed one)."""

    def __init__(self, rand: Callable[[], float] = random.random):
        self._leases: Dict[str, _Held] = {}  # by owner token
        self._rand = rand
        # The current stream: its generation, and whether it is open. News
        # of any other generation is stale (a stream let go of).
        self._gen = 0
        self._open = False
        # Heartbeat sequence numbers go on across streams.
        self._seq = 0
        # Heartbeats of the current stream awaiting their answer.
        self._pending: hb.Pending = {}
        self._next_beat = 0.0
        # When the last beat was sent: the next is planned from it again
        # when an answer changes an auto lease's TTL.
        self._last_beat = 0.0
        # The last round trip measured on the current stream, reported in
        # each heartbeat (microseconds; 0: none yet).
        self._round_trip_us = 0
        #: The TTL advice of the last answer (None: it carried none).
        self.advice: Optional[TtlAdvice] = None
        # The generation of the stream whose advice was told (logged and
        # handed to the driver), so that it is told once per stream.
        self._advised_gen = 0
        self._reconnect_at = 0.0
        self._backoff = hb.MIN_BACKOFF
        self._closed = False

    # -- the registry (any thread, under the driver's lock) -----------------

    def add(self, held: _Held) -> None:
        """Registers a lease to keep (then the driver posts
        :class:`LeaseAdded`, so that its next beat is planned again)."""
        self._leases[held.token] = held

    def forget(self, held: _Held) -> None:
        """Stops keeping ``held`` (released, lost, or given up on), unless
        another lease has taken its token's place."""
        if self._leases.get(held.token) is held:
            del self._leases[held.token]

    def leases(self) -> List[_Held]:
        """The registered leases (live or not yet found lost)."""
        return list(self._leases.values())

    @property
    def closed(self) -> bool:
        return self._closed

    # -- events (the keeper's thread or task only) ---------------------------

    def handle(self, event: Event, now: float, backlog: int = 0) -> List[Action]:
        """What to do about ``event``, which happened at ``now``. ``backlog``:
        how many heartbeats the current stream has not yet taken from the
        driver (0 when none is open); too many and it counts as stuck.

        After the event itself, every step looks at the leases and the
        stream as they are now (what the thread and task keepers did at the
        top of their loops): the leases whose local deadline passed are
        lost, a stream is opened if one is needed and due, a heartbeat is
        sent if one is due. The last action is :class:`Sleep` (or
        :class:`Stop`)."""
        if self._closed:
            return [Stop()]
        actions: List[Action] = []
        if isinstance(event, Close):
            if self._open:
                actions.append(Cancel())
                self._let_go()
            self._closed = True
            actions.append(Stop())
            return actions
        if isinstance(event, LeaseAdded):
            self._added(now)
        elif isinstance(event, LeaseDropped):
            self._dropped(event.held, now, actions)
        elif isinstance(event, Answered):
            self._answered(event, now, actions)
        elif isinstance(event, StreamEnded):
            self._ended(event, now, actions)
        elif not isinstance(event, TimerFired):
            raise TypeError(f"not a keeper event: {event!r}")
        self._step(now, backlog, actions)
        return actions

    def _added(self, now: float) -> None:
        # A new lease may have a shorter TTL than the current beat allows
        # for. Not beaten at once: its deadline counts from its grant.
        if self._open:
            self._next_beat = min(self._next_beat, now + hb.beat_interval(self.leases()))

    def _dropped(self, held: _Held, now: float, actions: List[Action]) -> None:
        if held.released:
            return
        held.released = True
        self.forget(held)
        reason = held.loss(now)
        # One the broker reported gone has nothing to release; one only
        # past its local deadline may still be held there.
        if reason is None or reason is LossReason.DEADLINE_PASSED:
            actions.append(Release(held.name, held.token))

    def _answered(self, event: Answered, now: float, actions: List[Action]) -> None:
        if not self._current(event.gen):
            return
        # The stream works: the next break starts its backoff afresh.
        self._backoff = hb.MIN_BACKOFF
        sent = hb.sent_at(self._pending, event.response)
        interval = hb.beat_interval(self.leases())
        for held, reason, message in hb.apply(self._pending, event.response, now):
            self.forget(held)
            actions.append(Lost(held, reason, message))
        if sent is None:
            return  # not a heartbeat awaited: neither measured nor advice
        self._round_trip_us = round_trip_us(now - sent)
        # An auto lease's TTL may have changed: the next beat comes a third
        # of the shortest TTL after the last one, as planned then.
        if hb.beat_interval(self.leases()) != interval:
            self._next_beat = self._last_beat + hb.beat_interval(self.leases())
        self.advice = advice_of(event.response)
        if self.advice is not None and self._advised_gen != self._gen:
            self._advised_gen = self._gen
            log.warning(
                "TTL advice from the broker (heartbeat stream %d): %s [p99 round trip %.0f ms, "
                "shortest TTL %.3g s, suggested TTL %.3g s, %d lease(s) below]",
                self._gen, self.advice.message, self.advice.round_trip_p99 * 1000,
                self.advice.shortest_ttl, self.advice.suggested_ttl, self.advice.leases_below,
            )
            actions.append(Advised(self.advice))

    def _ended(self, event: StreamEnded, now: float, actions: List[Action]) -> None:
        if not self._current(event.gen):
            return
        error = event.error
        if error is not None:
            code = error.code() if hasattr(error, "code") else None
            details = error.details() if hasattr(error, "details") else str(error)
            log.debug("KeepAlive stream %d ended: %s %s", event.gen, code, details)
            if not_connected(error):
                # The replica cannot be reached: resume the leases on the
                # next one (if any).
                actions.append(Unreachable(event.index))
        actions.append(HalfClose())
        self._let_go()
        # Retry soon enough to resume the leases before their deadlines:
        # never wait longer than a heartbeat interval.
        delay = min(hb.jitter(self._backoff, self._rand), hb.beat_interval(self.leases()))
        self._reconnect_at = now + delay
        self._backoff = min(self._backoff * 2, hb.MAX_BACKOFF)

    def _current(self, gen: int) -> bool:
        return self._open and gen == self._gen

    def _let_go(self) -> None:
        """The current stream is no more (the action that ends it is the
        caller's): its unanswered heartbeats will never be answered, and a
        round trip measured on it is no news for the next one."""
        self._open = False
        self._pending.clear()
        self._round_trip_us = 0

    # -- every step ----------------------------------------------------------

    def _live(self, now: float, actions: List[Action]) -> List[_Held]:
        """The registered leases still alive at ``now``. Those found lost
        are forgotten; those whose local deadline passed are lost now
        (whatever the broker says later) and released in the background."""
        live = []
        for held in self.leases():
            reason = held.loss(now)
            if reason is None:
                live.append(held)
                continue
            self.forget(held)
            if reason is LossReason.DEADLINE_PASSED:
                log.warning("lease %r lost: %s", held.name, reason)
                actions.append(Lost(held, reason, DEADLINE_MESSAGE))
                actions.append(Release(held.name, held.token))
        return live

    def _step(self, now: float, backlog: int, actions: List[Action]) -> None:
        live = self._live(now, actions)
        beat_due = self._open and now >= self._next_beat
        if beat_due and live and hb.stuck(self._pending, backlog, live, now):
            # Answers stopped coming (or gRPC stopped taking heartbeats):
            # a stream that looks open but carries nothing. Reconnect now.
            log.debug("KeepAlive stream %d stalled; reconnecting", self._gen)
            actions.append(Cancel())
            self._let_go()
            self._reconnect_at = now
        if not self._open and live and now >= self._reconnect_at:
            self._gen += 1
            self._open = True
            actions.append(OpenStream(self._gen, len(live)))
            # Beat at once: after a reconnection this resumes the leases.
            self._next_beat = now
        if self._open and now >= self._next_beat:
            if not live:
                actions.append(HalfClose())  # a clean end, not a loss
                self._let_go()
            else:
                self._seq, requests = hb.heartbeats(live, self._seq, now, self._pending, self._round_trip_us)
                actions.extend(Send(r) for r in requests)
                self._last_beat = now
                self._next_beat = now + hb.beat_interval(live)
        # Sleep until the next thing to do: a heartbeat, a reconnection, or
        # the nearest local deadline (to report it lost on time).
        until: Optional[float] = None
        if live:
            until = self._next_beat if self._open else self._reconnect_at
            until = min([until] + [h.deadline for h in live])
        actions.append(Sleep(until))


# -- what both drivers do with the actions -----------------------------------


class Stream(Protocol):
    """What a driver's KeepAlive stream offers the core's actions."""

    #: The replica it was opened to (for StreamEnded).
    index: int

    def send(self, request: pb.KeepAliveRequest) -> None: ...

    def backlog(self) -> int: ...

    def half_close(self) -> None: ...

    def cancel(self) -> None: ...


class Driver:
    """The part of a keeper that is the same with threads and with asyncio:
    which stream method or driver method each action calls. A driver sets
    ``_core``, ``_brokers`` and ``_stream`` (None) and implements
    :meth:`_open`, :meth:`_fire` and :meth:`release_in_background`; its
    loop hands each event to ``_core.handle(event, now, self._backlog())``,
    passes the actions to :meth:`_perform`, and waits as that says."""

    _core: KeeperCore
    _brokers: Brokers
    #: The current stream: set by OpenStream, let go of by HalfClose and
    #: Cancel (the core asks for nothing else without one).
    _stream: Optional[Stream]

    def _open(self, gen: int) -> Stream:
        """Opens a KeepAlive stream to ``self._brokers.current()``, whose
        news (:class:`Answered`, :class:`StreamEnded`) reaches the inbox
        tagged with ``gen``."""
        raise NotImplementedError

    def _fire(self, callbacks: list, reason: LossReason, name: str) -> None:
        """Runs a lost lease's callbacks, without delaying the keeper."""
        raise NotImplementedError

    def _advise(self, advice: TtlAdvice) -> None:
        """Calls the application's ``on_ttl_advice`` (if any), without
        delaying the keeper."""
        raise NotImplementedError

    def release_in_background(self, name: str, token: str) -> None:
        raise NotImplementedError

    def _backlog(self) -> int:
        return 0 if self._stream is None else self._stream.backlog()

    def _perform(self, actions: List[Action]) -> Optional[Sleep]:
        """Performs the actions of one step; returns its :class:`Sleep`, or
        None when the keeper must stop."""
        for action in actions:
            if isinstance(action, Send):
                assert self._stream is not None
                self._stream.send(action.request)
            elif isinstance(action, Sleep):
                return action
            elif isinstance(action, Stop):
                return None
            elif isinstance(action, OpenStream):
                self._stream = self._open(action.gen)
                log.debug(
                    "opening heartbeat stream %d to %s for %d lease(s)",
                    action.gen, self._brokers.targets[self._stream.index], action.leases,
                )
            elif isinstance(action, (HalfClose, Cancel)):
                assert self._stream is not None
                if isinstance(action, Cancel):
                    self._stream.cancel()
                else:
                    self._stream.half_close()
                self._stream = None
            elif isinstance(action, Unreachable):
                self._brokers.unreachable(action.index)
            elif isinstance(action, Lost):
                callbacks = action.held.mark_lost(action.reason, action.message)
                self._fire(callbacks, action.reason, action.held.name)
            elif isinstance(action, Release):
                self.release_in_background(action.name, action.token)
            elif isinstance(action, Advised):
                self._advise(action.advice)
            else:  # pragma: no cover - a bug
                raise TypeError(f"not a keeper action: {action!r}")
        raise AssertionError("a step ends with Sleep or Stop")  # pragma: no cover
