"""TTL advice and ``ttl="auto"``: the broker measures each heartbeat
stream's round trips (as this client reports them: from sending a heartbeat
to reading its answer) and says when a lease's TTL is under ten times their
99th percentile, since then a heartbeat as slow as the slowest of the last
128 eats a tenth of the lease's life, and one stall more loses it. The same
figure gives ``ttl="auto"``: a TTL the broker picks for the latency it
measured (ten times the p99, at least its ``--ttl-auto-floor``, within its
``--ttl-min`` and ``--ttl-max``), followed as the latency changes.

What the client does with it (both keepers, through _keepcore): it reports
the last round trip it measured on a stream in each heartbeat; it logs a warning
the first time a stream's answers carry advice (not at every heartbeat: a
slow network is news once), keeps the latest advice for the application
(``Client.ttl_advice``) and calls ``on_ttl_advice`` then too.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Union

from ._proto import leasehold_pb2 as pb

#: The ``ttl`` that lets the broker choose (``acquire(name, ttl=AUTO)``).
AUTO = "auto"


@dataclasses.dataclass(frozen=True)
class TtlAdvice:
    """The broker's advice on a heartbeat stream's TTLs (the proto's
    ``TtlAdvice``): some lease it renewed has a TTL under ten times the p99
    of the stream's heartbeat round trips. Durations are in seconds."""

    #: The 99th percentile of the stream's last 128 heartbeat round trips.
    round_trip_p99: float
    #: The shortest TTL the heartbeat renewed.
    shortest_ttl: float
    #: A TTL fit for the measured latency: what ``ttl="auto"`` gives.
    suggested_ttl: float
    #: How many leases of the heartbeat have a TTL under ten times the p99.
    leases_below: int
    #: The broker's sentence, for people and logs.
    message: str

    @staticmethod
    def _from(advice: pb.TtlAdvice) -> "TtlAdvice":
        return TtlAdvice(
            round_trip_p99=advice.round_trip_p99_us / 1e6,
            shortest_ttl=advice.shortest_ttl_ms / 1000.0,
            suggested_ttl=advice.suggested_ttl_ms / 1000.0,
            leases_below=advice.leases_below,
            message=advice.message,
        )


#: What ``on_ttl_advice=`` takes: a function of the advice (with the
#: asyncio client, a coroutine function too).
AdviceCallback = Callable[[TtlAdvice], Union[None, Any]]


def advice_of(response: pb.KeepAliveResponse) -> Union[TtlAdvice, None]:
    """The advice an answer carries, or None."""
    if not response.HasField("advice"):
        return None
    return TtlAdvice._from(response.advice)


def round_trip_us(seconds: float) -> int:
    """A measured round trip as ``last_round_trip_us`` carries it: at least
    1, since 0 means "none measured"."""
    return max(1, int(round(seconds * 1e6)))
