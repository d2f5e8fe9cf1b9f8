"""Waits without a limit (``wait=None``) and waits longer than the broker's
--max-wait: chains of Acquire calls, each sent while the previous one still
waits (see _core.WaitPlan for what that keeps of the caller's place)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time

import pytest

from leasehold import AsyncClient, Client, NotAcquired

from conftest import SHORT_MAX_WAIT, eventually, eventually_async


def waiters(client, name) -> int:
    return client.describe(name).waiters


def test_wait_none_outlasts_several_max_waits_and_gets_the_lock(short_wait_broker, name):
    with Client(short_wait_broker.address) as a, Client(short_wait_broker.address) as b:
        holder = a.acquire(name, ttl=30)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            started = time.monotonic()
            waiting = pool.submit(b.acquire, name, 10, None, "patient")
            # Each chained call overlaps its predecessor: the line shows two
            # places of this caller for a moment, then one. Seen twice, the
            # wait has outlived two --max-wait windows.
            for _ in range(2):
                eventually(lambda: waiters(a, name) == 2, 3 * SHORT_MAX_WAIT, "the next call of the chain")
                eventually(lambda: waiters(a, name) == 1, 3 * SHORT_MAX_WAIT, "the previous call left")
                assert not waiting.done(), waiting.exception()
            assert time.monotonic() - started > SHORT_MAX_WAIT
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


def test_the_gap_a_plain_wait_that_arrived_during_a_chain_segment_goes_first(short_wait_broker, name):
    """What the broker cannot do: a place lives as long as its call, and an
    AcquireRequest cannot name an earlier place. A caller B that arrived
    while the chained caller A's call waited, and still waits when that
    call's --max-wait runs out, is served before A's next call."""
    with Client(short_wait_broker.address) as a, Client(short_wait_broker.address) as chained, \
            Client(short_wait_broker.address) as plain:
        holder = a.acquire(name, ttl=30)
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            started = time.monotonic()
            patient = pool.submit(chained.acquire, name, 10, None, "chained")
            eventually(lambda: waiters(a, name) == 1, 5.0, "the chained waiter queued")
            # B arrives half-way through A's first call and waits for as long
            # as the broker allows: it outlives A's first call by ~1 s.
            time.sleep(max(0.0, started + SHORT_MAX_WAIT / 2 - time.monotonic()))
            hurried = pool.submit(plain.acquire, name, 10, SHORT_MAX_WAIT, "plain")
            # A's second call joins (3 places), then its first leaves (2):
            # B is now ahead of A.
            eventually(lambda: waiters(a, name) == 3, 5.0, "the chain's next call")
            eventually(lambda: waiters(a, name) == 2, 5.0, "the chain's first call left")
            if hurried.done():
                pytest.fail(f"B gave up before the check (loaded machine?): {hurried.exception()}")
            holder.release()
            b_lease = hurried.result(timeout=10)
            assert a.describe(name).holder == "plain"
            assert not patient.done()
            b_lease.release()
            a_lease = patient.result(timeout=10)
        assert a_lease.fence > b_lease.fence
        a_lease.release()


async def test_async_wait_none_outlasts_max_wait(short_wait_broker, name):
    async with AsyncClient(short_wait_broker.address) as a, AsyncClient(short_wait_broker.address) as b:
        holder = await a.acquire(name, ttl=30)
        waiting = asyncio.ensure_future(b.acquire(name, ttl=10, wait=None, holder="patient"))

        async def places(n):
            assert not waiting.done(), waiting
            return (await a.describe(name)).waiters == n

        await eventually_async(lambda: places(2), 3 * SHORT_MAX_WAIT, "the next call of the chain")
        await eventually_async(lambda: places(1), 3 * SHORT_MAX_WAIT, "the previous call left")
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
            eventually(lambda: waiters(a, name) == 2, 3 * SHORT_MAX_WAIT, "the next call of the chain")
            eventually(lambda: waiters(a, name) == 1, 3 * SHORT_MAX_WAIT, "the previous call left")
            assert not candidate.done(), candidate.exception()
            leader.release()  # resigns
            lead = candidate.result(timeout=10)
        assert lead.waited > SHORT_MAX_WAIT
        assert a.leader(name).value == "node-b" and a.leader(name).term == lead.fence
        lead.release()


def test_a_cap_of_one_waiter_per_connection_turns_the_chain_sequential(tmp_path, name):
    from conftest import Broker

    capped = Broker(tmp_path / "broker.log", args=["--max-wait", f"{SHORT_MAX_WAIT:g}s", "--conn-max-waiters", "1"])
    try:
        with Client(capped.address) as a, Client(capped.address) as b:
            holder = a.acquire(name, ttl=30)
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                started = time.monotonic()
                waiting = pool.submit(b.acquire, name, 10, None, "patient")
                eventually(lambda: waiters(a, name) == 1, 5.0, "the waiter queued")
                # The overlapping call is refused (RESOURCE_EXHAUSTED): the
                # chain goes on with one call at a time, past --max-wait.
                eventually(lambda: time.monotonic() - started > 2.5 * SHORT_MAX_WAIT and waiters(a, name) == 1,
                           5 * SHORT_MAX_WAIT, "still waiting past two --max-wait windows")
                assert not waiting.done(), waiting.exception()
                holder.release()
                lease = waiting.result(timeout=10)
            assert a.describe(name).holder == "patient"
            lease.release()
    finally:
        capped.stop()
