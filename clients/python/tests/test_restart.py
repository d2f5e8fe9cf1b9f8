"""A waiting acquire across a broker's graceful restart: two brokers on one
Redis, the waiter's broker sent SIGTERM. The broker ends the wait with
UNAVAILABLE "shutting down" and keeps the place in line (leasehold-place);
the client takes it to the next broker address, as it does with the place an
expired wait kept, so the application sees no error and nobody who queued
later overtakes it."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time

import grpc
import pytest

from leasehold import AsyncClient, Client, LeaseholdError, NotAcquired

from conftest import Broker, eventually, eventually_async


@pytest.fixture
def two_brokers(redis, tmp_path):
    """Two brokers sharing one redis-server, as replicas in production."""
    first = Broker(tmp_path / "first.log", store=redis.url)
    second = Broker(tmp_path / "second.log", store=redis.url)
    yield first, second
    first.stop()
    second.stop()


def line(client, name):
    """(callers in line on every broker, callers waiting on ``client``'s)."""
    d = client.describe(name)
    return d.waiters, d.local_waiters


def test_an_endless_wait_keeps_its_place_across_its_brokers_graceful_restart(two_brokers, name):
    """The waiter's broker shuts down gracefully: the wait goes on through
    the other broker, in its place (ahead of a caller that queued after it),
    and never fails."""
    first, second = two_brokers
    # The pool is left last: closing the clients first ends the endless
    # waits of a test that failed.
    with concurrent.futures.ThreadPoolExecutor(2) as pool, Client([first.address, second.address]) as waiter, \
            Client(second.address) as later, Client(second.address) as watcher:
        holder = watcher.acquire(name, ttl=30, holder="holder")
        one = pool.submit(waiter.acquire, name, 10, None, "first")
        eventually(lambda: line(watcher, name) == (1, 0), 10.0, "the first waiter queued on the first broker")
        assert waiter.target == first.address
        two = pool.submit(later.acquire, name, 10, None, "second")
        eventually(lambda: line(watcher, name) == (2, 1), 10.0, "the second waiter queued behind it")

        first.terminate()
        # The first waiter now waits on the second broker too, in the place
        # it kept: still two in line, both waiting there.
        eventually(lambda: one.done() or line(watcher, name) == (2, 2), 10.0,
                   "the first waiter moved to the second broker")
        assert not one.done(), f"the wait failed: {one.exception()!r}"
        assert waiter.target == second.address

        holder.release()
        # Whoever is granted first (the other then waits on).
        concurrent.futures.wait([one, two], timeout=10, return_when=concurrent.futures.FIRST_COMPLETED)
        assert watcher.describe(name).holder == "first"
        assert not two.done(), "the caller that queued later was served first"
        lease = one.result(timeout=10)
        assert lease.fence > holder.fence
        lease.release()
        next_lease = two.result(timeout=10)
        assert next_lease.fence > lease.fence
        next_lease.release()


async def test_an_async_endless_wait_keeps_its_place_across_its_brokers_graceful_restart(two_brokers, name):
    """The same with the asyncio client: its chain goes on through the other
    broker, in its place."""
    first, second = two_brokers
    async with AsyncClient([first.address, second.address]) as waiter, AsyncClient(second.address) as later, \
            AsyncClient(second.address) as watcher:
        holder = await watcher.acquire(name, ttl=30, holder="holder")

        def in_line(expected):
            async def check():
                d = await watcher.describe(name)
                return (d.waiters, d.local_waiters) == expected

            return check

        one = asyncio.ensure_future(waiter.acquire(name, ttl=10, wait=None, holder="first"))
        await eventually_async(in_line((1, 0)), 10.0, "the first waiter queued on the first broker")
        two = asyncio.ensure_future(later.acquire(name, ttl=10, wait=None, holder="second"))
        await eventually_async(in_line((2, 1)), 10.0, "the second waiter queued behind it")

        await asyncio.get_running_loop().run_in_executor(None, first.terminate)

        async def moved():
            return one.done() or await in_line((2, 2))()

        await eventually_async(moved, 10.0, "the first waiter moved to the second broker")
        if one.done():
            await holder.release()
            pytest.fail(f"the wait failed: {one.exception()!r}")

        await holder.release()
        # Whoever is granted first (the other then waits on).
        await asyncio.wait([one, two], timeout=10, return_when=asyncio.FIRST_COMPLETED)
        assert (await watcher.describe(name)).holder == "first"
        assert not two.done(), "the caller that queued later was served first"
        lease = await asyncio.wait_for(one, 10)
        await lease.release()
        next_lease = await asyncio.wait_for(two, 10)
        assert next_lease.fence > lease.fence
        await next_lease.release()


def test_a_finite_wait_across_a_graceful_restart_still_ends_at_its_deadline(two_brokers, name):
    """A wait with a deadline goes on through the other broker after its
    broker's shutdown, and ends at its deadline with NotAcquired, not with
    the shutdown's UNAVAILABLE."""
    first, second = two_brokers
    with concurrent.futures.ThreadPoolExecutor(1) as pool, Client([first.address, second.address]) as waiter, \
            Client(second.address) as watcher:
        holder = watcher.acquire(name, ttl=30, holder="holder")
        wait = 6.0
        started = time.monotonic()
        waiting = pool.submit(waiter.acquire, name, 10, wait, "finite")
        eventually(lambda: line(watcher, name) == (1, 0), 10.0, "the waiter queued on the first broker")
        first.terminate()
        with pytest.raises(NotAcquired):
            waiting.result(timeout=wait + 10)
        elapsed = time.monotonic() - started
        assert wait - 0.2 <= elapsed <= wait + 5.0, elapsed
        assert waiter.target == second.address
        # It left the line when it gave up.
        eventually(lambda: line(watcher, name) == (0, 0), 5.0, "the caller left the line")
        holder.release()


def test_when_every_broker_is_gone_the_wait_fails_unavailable_instead_of_spinning(two_brokers, name):
    """Both brokers stop, the waiter's gracefully: with no broker left to
    wait on, the endless wait fails with UNAVAILABLE (as any call that can
    reach no broker) within a few seconds."""
    first, second = two_brokers
    with concurrent.futures.ThreadPoolExecutor(1) as pool, \
            Client([first.address, second.address], timeout=5) as waiter, Client(first.address) as watcher:
        # Kept referenced (a lease dropped is released); it expires in Redis
        # once its broker is gone.
        holder = watcher.acquire(name, ttl=30, holder="holder")
        waiting = pool.submit(waiter.acquire, name, 10, None, "stranded")
        eventually(lambda: line(watcher, name) == (1, 1), 10.0, "the waiter queued on the first broker")
        second.kill()
        first.terminate()
        started = time.monotonic()
        with pytest.raises(LeaseholdError) as e:
            waiting.result(timeout=30)
        assert time.monotonic() - started < 15
        assert e.value.code == grpc.StatusCode.UNAVAILABLE, e.value


def test_an_endless_wait_keeps_its_place_across_a_rolling_restart_of_every_broker(redis, tmp_path, name):
    """Both of the waiter's brokers restart gracefully, one after the other
    (the first back before the second goes): the wait follows, and keeps its
    place ahead of a caller that queued later, through a third broker."""
    first = Broker(tmp_path / "first.log", store=redis.url)
    second = Broker(tmp_path / "second.log", store=redis.url)
    third = Broker(tmp_path / "third.log", store=redis.url)
    brokers = [first, second, third]
    try:
        with concurrent.futures.ThreadPoolExecutor(2) as pool, \
                Client([first.address, second.address]) as waiter, Client(third.address) as later, \
                Client(third.address) as watcher:
            holder = watcher.acquire(name, ttl=30, holder="holder")
            one = pool.submit(waiter.acquire, name, 10, None, "first")
            eventually(lambda: line(watcher, name) == (1, 0), 10.0, "the first waiter queued")
            two = pool.submit(later.acquire, name, 10, None, "second")
            eventually(lambda: line(watcher, name) == (2, 1), 10.0, "the second waiter queued behind it")

            def waits_on(broker):
                with Client(broker.address) as c:
                    return c.describe(name).local_waiters == 1

            first.terminate()
            eventually(lambda: one.done() or waits_on(second), 10.0, "the waiter moved to the second broker")
            assert not one.done(), f"the wait failed: {one.exception()!r}"
            moved = time.monotonic()
            first = Broker(tmp_path / "first-again.log", store=redis.url, port=first.port)
            brokers.append(first)
            # A precondition, not a synchronisation: the wait has been served
            # by the second broker for a while (past _core._SERVED_FOR) when
            # that one restarts, as in a real rolling restart.
            time.sleep(max(0.0, moved + 1.5 - time.monotonic()))
            second.terminate()
            eventually(lambda: one.done() or waits_on(first), 10.0, "the waiter moved back to the restarted first")
            assert not one.done(), f"the wait failed: {one.exception()!r}"
            assert line(watcher, name) == (2, 1)

            holder.release()
            concurrent.futures.wait([one, two], timeout=10, return_when=concurrent.futures.FIRST_COMPLETED)
            assert watcher.describe(name).holder == "first"
            assert not two.done(), "the caller that queued later was served first"
            one.result(timeout=10).release()
            two.result(timeout=10).release()
    finally:
        for b in brokers:
            b.stop()


async def test_an_async_wait_cancelled_after_moving_leaves_no_place_behind(two_brokers, name):
    """A wait that moved to the other broker after its own's shutdown, then
    cancelled, leaves the line at once (not when a kept place would lapse)."""
    first, second = two_brokers
    async with AsyncClient([first.address, second.address]) as waiter, AsyncClient(second.address) as watcher:
        holder = await watcher.acquire(name, ttl=30, holder="holder")

        def in_line(expected):
            async def check():
                d = await watcher.describe(name)
                return (d.waiters, d.local_waiters) == expected

            return check

        waiting = asyncio.ensure_future(waiter.acquire(name, ttl=10, wait=None))
        await eventually_async(in_line((1, 0)), 10.0, "the waiter queued on the first broker")
        await asyncio.get_running_loop().run_in_executor(None, first.terminate)

        async def moved():
            return waiting.done() or await in_line((1, 1))()

        await eventually_async(moved, 10.0, "the waiter moved to the second broker")
        assert not waiting.done(), waiting
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await eventually_async(in_line((0, 0)), 2.0, "the place was given up")
        await holder.release()
