"""Waits without a limit (``wait=None``) and waits longer than the broker's
--max-wait: chains of Acquire calls, one after the other, each waiting in
the place in line the previous one kept (keep_place; see _core.WaitPlan)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time

import pytest

from leasehold import AsyncClient, Client, NotAcquired

from conftest import SHORT_MAX_WAIT, eventually, eventually_async


def waiters(client, name) -> int:
    return client.describe(name).waiters


def holds_one_place_for(client, name, seconds, waiting, holder) -> None:
    """Watches the line for ``seconds`` (past the end of the chain's first
    calls): the waiter holds exactly one place all along, never out of the
    line between its calls. On failure the holder releases first, so that
    the waiter (waiting without end) lets the test end."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        failure = None
        if waiting.done():
            failure = f"the wait ended: {waiting.exception()}"
        else:
            seen = waiters(client, name)
            if seen != 1:
                failure = f"{seen} places in line, not 1"
        if failure:
            holder.release()
            pytest.fail(failure)
        time.sleep(0.05)


def test_wait_none_outlasts_several_max_waits_and_gets_the_lock(short_wait_broker, name):
    with Client(short_wait_broker.address) as a, Client(short_wait_broker.address) as b:
        holder = a.acquire(name, ttl=30)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            started = time.monotonic()
            waiting = pool.submit(b.acquire, name, 10, None, "patient")
            eventually(lambda: waiters(a, name) == 1, 5.0, "the waiter queued")
            # Past two --max-wait windows, in one place all along.
            holds_one_place_for(a, name, 2.5 * SHORT_MAX_WAIT, waiting, holder)
            assert time.monotonic() - started > 2 * SHORT_MAX_WAIT
            holder.release()
            lease = waiting.result(timeout=10)
        assert lease.fence > holder.fence
        assert lease.waited > SHORT_MAX_WAIT, lease.waited
        assert a.describe(name).holder == "patient"
        # The broker's limit was learnt from its refusal of the first call.
        assert b._max_wait == SHORT_MAX_WAIT
        lease.release()


def test_a_finite_wait_beyond_max_wait_ends_with_not_acquired_not_a_refusal(short_wait_broker, name):
    with Client(short_wait_broker.address) as a, Client(short_wait_broker.address) as b:
        holder = a.acquire(name, ttl=30)
        wait = 2.5 * SHORT_MAX_WAIT
        started = time.monotonic()
        with pytest.raises(NotAcquired):
            b.acquire(name, ttl=5, wait=wait)
        elapsed = time.monotonic() - started
        assert wait - 0.2 <= elapsed <= wait + 5.0, elapsed
        # It left the line when it gave up.
        eventually(lambda: waiters(a, name) == 0, 5.0, "the caller left the line")
        holder.release()


def test_a_chained_wait_keeps_its_place_ahead_of_later_callers_that_chain(short_wait_broker, name):
    with Client(short_wait_broker.address) as a, Client(short_wait_broker.address) as first, \
            Client(short_wait_broker.address) as second:
        holder = a.acquire(name, ttl=30)
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            one = pool.submit(first.acquire, name, 10, None, "first")
            eventually(lambda: waiters(a, name) == 1, 5.0, "the first waiter queued")
            two = pool.submit(second.acquire, name, 10, None, "second")
            eventually(lambda: waiters(a, name) >= 2, 5.0, "the second waiter queued")
            # Past two --max-wait windows: both chains re-issued their calls.
            time.sleep(2.5 * SHORT_MAX_WAIT)
            holder.release()
            lease = one.result(timeout=10)
            assert not two.done()
            assert a.describe(name).holder == "first"
            lease.release()
            second_lease = two.result(timeout=10)
        assert second_lease.fence > lease.fence
        second_lease.release()


def test_a_plain_wait_that_arrived_during_a_chain_call_does_not_overtake(short_wait_broker, name):
    """The chained caller A keeps its place across its calls: a caller B
    that arrived while A's first call waited, and still waits when that
    call's --max-wait runs out, stays behind A's next call."""
    with Client(short_wait_broker.address) as a, Client(short_wait_broker.address) as chained, \
            Client(short_wait_broker.address) as plain:
        holder = a.acquire(name, ttl=30)
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            started = time.monotonic()
            # A finite chain (four --max-wait windows), so that a failure
            # ends.
            patient = pool.submit(chained.acquire, name, 10, 4 * SHORT_MAX_WAIT, "chained")
            eventually(lambda: waiters(a, name) == 1, 5.0, "the chained waiter queued")
            # B arrives during A's first call and waits for as long as the
            # broker allows: it outlives A's first call by more than 1 s.
            time.sleep(max(0.0, started + SHORT_MAX_WAIT * 0.6 - time.monotonic()))
            hurried = pool.submit(plain.acquire, name, 10, SHORT_MAX_WAIT, "plain")
            eventually(lambda: waiters(a, name) == 2, 5.0, "B queued")
            if time.monotonic() > started + SHORT_MAX_WAIT:
                pytest.fail("B queued after A's first call ended (loaded machine?)")
            # Past the end of A's first call: two places all along (A's next
            # call took A's place back rather than a third at the back).
            while time.monotonic() < started + SHORT_MAX_WAIT + 0.5:
                assert waiters(a, name) == 2
                time.sleep(0.05)
            if hurried.done():
                pytest.fail(f"B gave up before the check (loaded machine?): {hurried.exception()}")
            holder.release()
            a_lease = patient.result(timeout=10)
            assert a.describe(name).holder == "chained"
            assert not hurried.done()
            a_lease.release()
            b_lease = hurried.result(timeout=10)
        assert b_lease.fence > a_lease.fence
        b_lease.release()


async def test_async_wait_none_outlasts_max_wait(short_wait_broker, name):
    async with AsyncClient(short_wait_broker.address) as a, AsyncClient(short_wait_broker.address) as b:
        holder = await a.acquire(name, ttl=30)
        waiting = asyncio.ensure_future(b.acquire(name, ttl=10, wait=None, holder="patient"))

        async def queued():
            return (await a.describe(name)).waiters == 1

        await eventually_async(queued, 5.0, "the waiter queued")
        # Past the end of the first --max-wait window, in one place all along.
        end = time.monotonic() + 1.5 * SHORT_MAX_WAIT
        while time.monotonic() < end:
            assert not waiting.done(), waiting
            assert (await a.describe(name)).waiters == 1
            await asyncio.sleep(0.05)
        await holder.release()
        lease = await asyncio.wait_for(waiting, 10)
        assert lease.waited > SHORT_MAX_WAIT
        assert (await a.describe(name)).holder == "patient"
        await lease.release()


def test_campaign_wait_none_outlasts_max_wait(short_wait_broker, name):
    with Client(short_wait_broker.address) as a, Client(short_wait_broker.address) as b:
        leader = a.campaign(name, "node-a", ttl=30)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            candidate = pool.submit(b.campaign, name, "node-b", 10, None)
            eventually(lambda: waiters(a, name) == 1, 5.0, "the candidate queued")
            holds_one_place_for(a, name, 1.5 * SHORT_MAX_WAIT, candidate, leader)
            leader.release()  # resigns
            lead = candidate.result(timeout=10)
        assert lead.waited > SHORT_MAX_WAIT
        assert a.leader(name).value == "node-b" and a.leader(name).term == lead.fence
        lead.release()


def test_a_chain_fits_a_cap_of_one_waiter_per_connection(tmp_path, name):
    from conftest import Broker

    capped = Broker(tmp_path / "broker.log", args=["--max-wait", f"{SHORT_MAX_WAIT:g}s", "--conn-max-waiters", "1"])
    try:
        with Client(capped.address) as a, Client(capped.address) as b:
            holder = a.acquire(name, ttl=30)
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                started = time.monotonic()
                waiting = pool.submit(b.acquire, name, 10, None, "patient")
                eventually(lambda: waiters(a, name) == 1, 5.0, "the waiter queued")
                # The chain's calls never overlap: a cap of one waiting call
                # per connection lets it go on past --max-wait.
                eventually(lambda: time.monotonic() - started > 2.5 * SHORT_MAX_WAIT and waiters(a, name) == 1,
                           5 * SHORT_MAX_WAIT, "still waiting past two --max-wait windows")
                assert not waiting.done(), waiting.exception()
                holder.release()
                lease = waiting.result(timeout=10)
            assert a.describe(name).holder == "patient"
            lease.release()
    finally:
        capped.stop()
