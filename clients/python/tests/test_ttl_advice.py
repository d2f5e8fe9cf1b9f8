"""TTL advice and ttl="auto" against a real broker: a heartbeat stream made
slow by a proxy with latency is warned about a TTL under ten times its
measured p99 round trip (once), a fast stream is not; a lease taken with
ttl="auto" gets at least the broker's --ttl-auto-floor, and on a slow
stream its TTL grows to ten times the p99 measured."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from leasehold import AsyncClient, Client, TtlAdvice

from conftest import Broker, eventually, eventually_async
from proxy import Proxy

#: Each way: a heartbeat's round trip through the proxy is at least twice
#: this.
LATENCY = 0.1
#: The broker's --ttl-auto-floor.
FLOOR = 1.0


@pytest.fixture
def advising_broker(tmp_path):
    """A broker that allows TTLs short enough to be advised about quickly,
    with an auto TTL floor low enough for the growth to show; one per test,
    since ttl="auto" before a stream measured anything goes by the round
    trips of the tenant's other streams (none on a new broker: the floor)."""
    b = Broker(
        tmp_path / "broker.log",
        args=["--ttl-min", "100ms", "--ttl-auto-floor", f"{FLOOR:g}s"],
    )
    yield b
    b.stop()


@pytest.fixture
def slow(advising_broker):
    """The broker behind LATENCY each way."""
    p = Proxy(advising_broker.port, latency=LATENCY)
    yield p
    p.close()


def advice_lines(caplog):
    return [r for r in caplog.records if r.name == "leasehold" and "TTL advice" in r.getMessage()]


def test_the_slow_stream_is_warned_once_and_the_fast_one_not(advising_broker, slow, name, caplog):
    caplog.set_level(logging.WARNING, logger="leasehold")
    told = []
    advised = threading.Event()

    def on_slow(advice: TtlAdvice) -> None:
        told.append(advice)
        advised.set()

    fast_told = []
    with Client(slow.address, on_ttl_advice=on_slow) as slow_client, Client(
        advising_broker.address, on_ttl_advice=fast_told.append
    ) as fast_client:
        # 1.5 s under a round trip of at least 0.2 s: under 10x.
        slow_lease = slow_client.acquire(name + "/slow", ttl=1.5)
        # 3 s over a loopback round trip of a few milliseconds.
        fast_lease = fast_client.acquire(name + "/fast", ttl=3)
        first_deadline = fast_lease.deadline
        assert advised.wait(15), "the slow stream was never advised"
        advice = slow_client.ttl_advice
        assert advice is not None and told == [told[0]]
        assert advice.round_trip_p99 >= 2 * LATENCY and advice.shortest_ttl == 1.5 and advice.leases_below == 1
        assert advice.suggested_ttl == pytest.approx(max(FLOOR, 10 * advice.round_trip_p99), abs=0.002)
        assert "1.5" in advice.message or "1500" in advice.message, advice.message
        # Four renewals of the fast lease later (its deadline moves a beat,
        # a second, each time): the broker had three round trips of the
        # fast stream to judge, and said nothing.
        eventually(lambda: fast_lease.deadline >= first_deadline + 3.0 - 0.05, 15, "four renewals of the fast lease")
        assert fast_client.ttl_advice is None and fast_told == []
        # The slow stream was advised at every heartbeat since, but told once.
        assert slow_client.ttl_advice is not None and len(told) == 1
        assert len(advice_lines(caplog)) == 1, [r.getMessage() for r in advice_lines(caplog)]
        assert not slow_lease.is_lost() and not fast_lease.is_lost()


@pytest.mark.parametrize("session", [True, False], ids=["session", "keepalive"])
def test_ttl_auto_starts_at_the_floor_and_grows_on_a_slow_stream(advising_broker, slow, name, session):
    # Heartbeats on the Session stream, or (session=False) on a KeepAlive
    # stream after a unary Acquire.
    name = name.replace("[", "/").replace("]", "")  # the parameter's id: not in a lock name
    with Client(slow.address, session=session) as client:
        # Nothing measured yet on this broker: the floor.
        lease = client.acquire(name, ttl="auto")
        assert lease.ttl_auto and lease.ttl == FLOOR
        # Round trips of 0.2 s or more: 10x the p99 is 2 s or more.
        eventually(lambda: lease.ttl >= 20 * LATENCY, 15, "the auto TTL grows to 10x the p99")
        # An auto lease fits its stream: nothing to advise.
        assert client.ttl_advice is None
        lease.check()
    with Client(advising_broker.address) as client, pytest.raises(ValueError, match='"auto"'):
        client.acquire(name, ttl="automatic")


async def test_asyncio_advice_and_ttl_auto(advising_broker, slow, name):
    told = []
    advised = asyncio.Event()

    async def on_advice(advice: TtlAdvice) -> None:  # a coroutine function
        told.append(advice)
        advised.set()

    async with AsyncClient(slow.address, on_ttl_advice=on_advice) as client:
        assert client.ttl_advice is None
        lease = await client.acquire(name + "/short", ttl=1.5)
        auto = await client.acquire(name + "/auto", ttl="auto")
        assert auto.ttl_auto and auto.ttl == FLOOR
        await asyncio.wait_for(advised.wait(), 15)
        advice = client.ttl_advice
        assert advice is not None and advice.round_trip_p99 >= 2 * LATENCY
        # Only the 1.5 s lease is below 10x the p99: the auto one follows it.
        assert advice.leases_below == 1 and advice.shortest_ttl == 1.5

        async def grown() -> bool:
            return auto.ttl >= 20 * LATENCY

        await eventually_async(grown, 15, "the auto TTL grows to 10x the p99")
        assert len(told) == 1
        lease.check()
        auto.check()
