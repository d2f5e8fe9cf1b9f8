"""A held lease: its local deadline, its loss, and the handle users get."""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Callable, List, Optional

from .errors import LeaseLost, LossReason, redact

if TYPE_CHECKING:  # pragma: no cover
    from ._client import Client

log = logging.getLogger("leasehold")

LostCallback = Callable[[LossReason], None]

#: The message of a loss by DEADLINE_PASSED (the broker said nothing).
DEADLINE_MESSAGE = "no renewal was confirmed before the local deadline"


class _Held:
    """What the keeper tracks for one lease. Shared by the keeper thread and
    the application's threads, so every field that changes is guarded by
    ``_lock``; user callbacks are never called with it held."""

    def __init__(
        self,
        name: str,
        token: str,
        fence: int,
        ttl: float,
        margin: float,
        deadline: float,
        auto: bool = False,
        margin_follows_ttl: bool = False,
    ):
        self.name = name
        self.token = token
        self.fence = fence
        #: The TTL in force, in seconds: the granted one; for an ``auto``
        #: lease, the one the last confirmed renewal applied.
        self.ttl = ttl
        self.margin = margin
        #: Taken with ``ttl="auto"``: renewed for the TTL the broker
        #: suggests, which can change at each heartbeat.
        self.auto = auto
        #: The margin is the default tenth of the TTL, so it follows an
        #: ``auto`` lease's TTL (a margin the caller gave stays).
        self.margin_follows_ttl = margin_follows_ttl
        self._lock = threading.Lock()
        self._deadline = deadline
        self._reason: Optional[LossReason] = None
        self._message = ""
        self._callbacks: List[LostCallback] = []
        self._lost = threading.Event()
        self.released = False
        #: Called (without arguments, from the thread that marks the loss)
        #: once the lease is marked lost: how the asyncio client wakes
        #: the tasks waiting for the loss.
        self.on_marked: Optional[Callable[[], None]] = None

    @property
    def deadline(self) -> float:
        with self._lock:
            return self._deadline

    def renewed(self, sent: float, ttl_ms: int, now: Optional[float] = None) -> None:
        """Records a renewal confirmed for a heartbeat sent at ``sent``.

        The deadline counts from the *send* time, so latency can only make it
        early. It only moves forward, and a lease whose deadline already
        passed (at ``now``, default the clock's now) stays lost: the
        application may have seen it lost and must not see it come back.
        """
        if now is None:
            now = time.monotonic()
        with self._lock:
            if self._reason is not None or now >= self._deadline:
                return
            if self.auto and ttl_ms:
                # The renewal set the store's expiry to this TTL from now,
                # whatever the last one said: a shorter TTL moves the
                # deadline back (answers are applied in order).
                self.ttl = ttl_ms / 1000.0
                if self.margin_follows_ttl:
                    self.margin = self.ttl / 10.0
                self._deadline = sent + self.ttl - self.margin
                return
            deadline = sent + ttl_ms / 1000.0 - self.margin
            if deadline > self._deadline:
                self._deadline = deadline

    def loss(self, now: Optional[float] = None) -> Optional[LossReason]:
        """The loss reason, counting a deadline passed at ``now`` (default:
        the clock's now) as a loss, without recording it: the keeper does
        that, and runs the callbacks. The keeper passes the time of the
        event it handles, so that one step of its core (and a unit test of
        it) sees one instant."""
        if now is None:
            now = time.monotonic()
        with self._lock:
            if self._reason is not None:
                return self._reason
            if now >= self._deadline:
                return LossReason.DEADLINE_PASSED
            return None

    @property
    def message(self) -> str:
        with self._lock:
            return self._message

    def mark_lost(self, reason: LossReason, message: str = "") -> List[LostCallback]:
        """Records the loss (the first reason wins) and returns the callbacks
        to run: all of them the first time, none after."""
        with self._lock:
            if self._reason is not None:
                return []
            self._reason = reason
            self._message = message
            callbacks, self._callbacks = self._callbacks, []
        self._lost.set()
        if self.on_marked is not None:
            self.on_marked()
        return callbacks

    def add_callback(self, callback: LostCallback) -> Optional[LossReason]:
        """Registers ``callback``, or returns the reason if the lease is
        already lost (then the caller runs it)."""
        with self._lock:
            if self._reason is not None:
                return self._reason
            if time.monotonic() >= self._deadline:
                return LossReason.DEADLINE_PASSED
            self._callbacks.append(callback)
            return None

    def wait_lost(self, timeout: Optional[float]) -> Optional[LossReason]:
        """Blocks until the lease is lost (or its deadline passes), at most
        ``timeout`` seconds. Returns the reason, or None on timeout."""
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            reason = self.loss()
            if reason is not None:
                return reason
            now = time.monotonic()
            wake = self.deadline
            if end is not None:
                if now >= end:
                    return None
                wake = min(wake, end)
            # Woken early by mark_lost; otherwise at the deadline, which the
            # loop then sees as passed.
            self._lost.wait(max(0.0, wake - now) + 0.001)


def run_callbacks(callbacks: List[LostCallback], reason: LossReason, name: str) -> None:
    for callback in callbacks:
        try:
            callback(reason)
        except Exception:  # a broken callback must not stop the others
            log.exception("lost callback for lease %r raised", name)


class _LeaseView:
    """What a lease is, as both clients' lease handles show it."""

    _held: _Held

    # -- what the lease is ---------------------------------------------------

    @property
    def name(self) -> str:
        """The lock name."""
        return self._held.name

    @property
    def fence(self) -> int:
        """The fencing token: strictly greater than the fence of every earlier
        grant of this name. Compare fences, never subtract them."""
        return self._held.fence

    @property
    def owner_token(self) -> str:
        """The secret that proves ownership. Do not log it."""
        return self._held.token

    @property
    def ttl(self) -> float:
        """The TTL the broker granted, in seconds; for a lease taken with
        ``ttl="auto"``, the TTL the last confirmed renewal applied (the
        broker follows the measured latency, so it can change at each
        heartbeat)."""
        return self._held.ttl

    @property
    def ttl_auto(self) -> bool:
        """Whether the lease was taken with ``ttl="auto"``."""
        return self._held.auto

    @property
    def deadline(self) -> float:
        """Local deadline, on the :func:`time.monotonic` clock: the lease is
        valid at least until then unless the broker says it is lost. It is
        computed from the time each request was *sent*, less a safety margin
        (a tenth of the TTL by default), so it falls before the broker could
        expire the lease. It moves forward with each confirmed renewal."""
        return self._held.deadline

    @property
    def loss_reason(self) -> Optional[LossReason]:
        """Why the lease was lost, or None while it is held (and after a
        successful release)."""
        if self._held.released:
            return None
        return self._held.loss()

    @property
    def released(self) -> bool:
        """Whether :meth:`release` was called."""
        return self._held.released

    def is_lost(self) -> bool:
        """True once the lease can no longer be relied on: the broker said it
        is lost, its local deadline passed unrenewed, or it was released."""
        return self._held.released or self._held.loss() is not None

    def check(self) -> None:
        """Raises :class:`LeaseLost` if the lease is lost (or released). Call
        it right before each write."""
        if self._held.released:
            raise LeaseLost(LossReason.RELEASED)
        reason = self._held.loss()
        if reason is not None:
            raise LeaseLost(reason, self._held.message)

    def __repr__(self) -> str:
        if self._held.released:
            state = "released"
        else:
            reason = self._held.loss()
            state = "held" if reason is None else f"lost: {reason}"
        return (
            f"Lease(name={self._held.name!r}, fence={self._held.fence}, "
            f"owner_token={redact(self._held.token)!r}, state={state!r})"
        )

    __str__ = __repr__


class Lease(_LeaseView):
    """A held lease, renewed in the background by its :class:`Client`.

    Attach :attr:`fence` to every write made under the lease and have the
    storage refuse writes with a lower fence than one it already accepted:
    a lease alone cannot stop a holder that was paused past its TTL, a fence
    checked by the storage can. Call :meth:`check` before each write, so
    that a lease known to be lost stops the write before it happens.

    The lease is kept alive until :meth:`release` (or the end of a ``with``
    block), until it is lost, or until the object is garbage-collected (then
    it is released in the background, as the Rust client does on drop, so a
    forgotten lease cannot hold a lock forever).
    """

    def __init__(self, held: _Held, client: "Client", waited: float):
        self._held = held
        self._client = client
        #: How long the acquire waited for the lock, in seconds (over all the
        #: calls of a wait longer than the broker's --max-wait).
        self.waited = waited

    # -- loss notification ---------------------------------------------------

    def on_lost(self, callback: LostCallback) -> LostCallback:
        """Calls ``callback(reason)`` once, when the lease is lost: as soon as
        the broker says so, or when the local deadline passes without a
        confirmed renewal (even if the broker is unreachable).

        Callbacks run on a short-lived thread of their own, so a slow callback
        cannot delay the heartbeats of other leases. If the lease is already
        lost, the callback runs at once in the calling thread. A release is not
        a loss: callbacks do not run for it. Returns ``callback``, so it can be
        used as a decorator.
        """
        reason = self._held.add_callback(callback)
        if reason is not None and not self._held.released:
            run_callbacks([callback], reason, self._held.name)
        return callback

    def wait_lost(self, timeout: Optional[float] = None) -> Optional[LossReason]:
        """Blocks until the lease is lost, for at most ``timeout`` seconds;
        returns the reason, or None if it is still held."""
        return self._held.wait_lost(timeout)

    # -- ending it -----------------------------------------------------------

    def release(self) -> None:
        """Stops renewing the lease and releases it, waking the next waiter.

        Raises :class:`LeaseLost` if the lease was already lost: then it ran
        out while you held it (the broker answered NOT_FOUND or
        FAILED_PRECONDITION, or the keeper had already given it up). Calling
        it again after a release does nothing.
        """
        if self._held.released:
            return
        self._client._release_held(self._held)

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        # Raise LeaseLost only if the block itself succeeded: the caller must
        # learn that the lease did not last to the end, but an exception
        # already on its way out is more important than that.
        try:
            self.release()
        except LeaseLost:
            if exc_type is None:
                raise
        except Exception:
            if exc_type is None:
                raise
            log.debug("releasing lease %r on the way out of a failed block failed", self._held.name, exc_info=True)

    def __del__(self) -> None:
        # Only a queue put: safe from any thread, at any point (the keeper
        # does the network call).
        try:
            if not self._held.released:
                self._client._keeper.dropped(self._held)
        except Exception:
            pass
