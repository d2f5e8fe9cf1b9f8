"""The heartbeat rules both keepers follow (the thread of Client, the task
of AsyncClient), without their I/O: when to beat, what a beat names, what
an answer does to each lease, when a stream counts as stuck. The state
machine that applies them, event by event, is _keepcore.KeeperCore.

* one heartbeat every third of the shortest TTL, naming every live lease
  (several heartbeats when more than the broker's --max-stream-leases);
* each renewal moves a lease's local deadline to (heartbeat *send* time +
  granted TTL - safety margin), so latency can only make it early;
* a lease is lost when the broker answers LOST (or REJECTED), or when its
  local deadline passes without a confirmation, whatever the broker says
  later;
* a broken or stalled stream is reopened with jittered backoff, never
  longer than a heartbeat interval, and the leases resume by owner token;
* each heartbeat's round trip (send to answer) is measured, and the last
  one measured on the stream goes in every heartbeat after it, for the
  broker's TTL advice (a heartbeat without one would be judged by the
  store's time alone, which leaves the network out);
* a lease taken with ``ttl="auto"`` is renewed for the TTL the broker
  suggests (``LeaseRef.ttl_auto``), and its TTL, deadline and the beat
  follow the TTL each answer applied.
"""

from __future__ import annotations

import logging
import random
from typing import Callable, Dict, List, Optional, Tuple

from . import _wire
from ._lease import _Held
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

#: Heartbeats awaiting their answer: seq -> (send time, leases in order).
Pending = Dict[int, Tuple[float, List[_Held]]]


def beat_interval(leases: List[_Held]) -> float:
    """A third of the shortest TTL."""
    if not leases:
        return 1.0
    return max(min(h.ttl for h in leases) / 3.0, MIN_INTERVAL)


def jitter(d: float, rand: Callable[[], float] = random.random) -> float:
    """``d`` scaled by a random factor in [0.5, 1.5), so clients that lost
    the same broker do not reconnect in lockstep. ``rand`` gives a number
    in [0, 1) (a test passes a fixed one)."""
    return d * (0.5 + rand())


def stuck(pending: Pending, backlog: int, live: List[_Held], now: float) -> bool:
    """Whether the stream stalled: the oldest heartbeat has waited more than
    two intervals (and a second) for its answer, or gRPC is not taking the
    heartbeats."""
    interval = beat_interval(live)
    oldest = min((sent for sent, _ in pending.values()), default=None)
    stalled = oldest is not None and now - oldest > max(2 * interval, 1.0)
    return stalled or backlog > MAX_BACKLOG * -(-len(live) // HEARTBEAT_LEASES)


def heartbeats(
    live: List[_Held], seq: int, now: float, pending: Pending, round_trip_us: int = 0
) -> Tuple[int, List[pb.KeepAliveRequest]]:
    """The heartbeats of one beat (recorded in ``pending``) and the last seq.
    ``round_trip_us``: the last round trip measured on the stream (0:
    none yet)."""
    requests = []
    for start in range(0, len(live), HEARTBEAT_LEASES):
        chunk = live[start:start + HEARTBEAT_LEASES]
        seq += 1
        requests.append(
            pb.KeepAliveRequest(
                seq=seq,
                leases=[pb.LeaseRef(name=h.name, owner_token=h.token, ttl_ms=0, ttl_auto=h.auto) for h in chunk],
                last_round_trip_us=round_trip_us,
            )
        )
        pending[seq] = (now, chunk)
    return seq, requests


def sent_at(pending: Pending, response: pb.KeepAliveResponse) -> Optional[float]:
    """When the heartbeat this answers was sent (None: not one awaited, e.g.
    of a stream let go of), read before :func:`apply` forgets it."""
    entry = pending.get(response.seq)
    return None if entry is None else entry[0]


#: What an answer did to a lease it reports gone: the lease, why, and the
#: broker's message. The caller marks it lost (which wakes whoever waits for
#: the loss) and runs its callbacks: that is its I/O, not a rule.
Loss = Tuple[_Held, LossReason, str]


def apply(pending: Pending, response: pb.KeepAliveResponse, now: float) -> List[Loss]:
    """Applies a KeepAliveResponse received at ``now``: renews the leases it
    confirms, and returns those it reports gone (without marking them: see
    :data:`Loss`)."""
    entry = pending.pop(response.seq, None)
    if entry is None:
        return []
    # Answers come in order: older heartbeats still pending got none.
    for old in [s for s in pending if s < response.seq]:
        del pending[old]
    sent, leases = entry
    lost: List[Loss] = []
    for held, status in zip(leases, response.leases):
        if status.name != held.name or held.released:
            continue
        if status.state == _wire.ALIVE:
            held.renewed(sent, status.ttl_ms, now)
            continue
        if status.state == _wire.REJECTED:
            log.warning("broker rejected lease %r: %s", held.name, status.message)
            reason = LossReason.EXPIRED
        elif status.state == _wire.LOST:
            reason = loss_reason(held, status.reason, now)
        else:  # UNCONFIRMED (the store did not answer), UNSPECIFIED
            continue
        log.warning("lease %r lost: %s (%s)", held.name, reason, status.message)
        lost.append((held, reason, status.message))
    return lost


def loss_reason(held: _Held, reason: int, now: float) -> LossReason:
    named = _wire.named_loss(reason)
    if named is not None:
        return named
    # EXPIRED or unspecified, but gone before our own (early) deadline:
    # it cannot have expired, so the store lost it. The broker cannot
    # always tell (e.g. on a new stream's first heartbeat); we can.
    if now < held.deadline:
        return LossReason.STORE_LOST
    return LossReason.EXPIRED
