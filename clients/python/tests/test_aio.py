"""The asyncio client against a real broker (memory store): the same
semantics as the synchronous one."""

from __future__ import annotations

import asyncio
import time

import pytest

from leasehold import AsyncClient, AsyncLease, LeaseholdError, LeaseLost, LossReason, NotAcquired

from conftest import eventually_async

TTL = 0.5  # the broker's default --ttl-min


async def test_async_with_acquires_releases_and_a_second_acquire_is_refused(broker, name):
    async with AsyncClient(broker.address) as a, AsyncClient(broker.address) as b:
        async with a.acquire(name, ttl=5, holder="first") as lease:
            assert isinstance(lease, AsyncLease)
            assert lease.fence > 0 and lease.name == name
            lease.check()
            with pytest.raises(NotAcquired) as refused:
                await b.acquire(name, ttl=5, holder="second")
            assert "first" in str(refused.value)
            assert (await b.describe(name)).holder == "first"
            assert await b.check_fence(name, lease.fence)
        # The block released it: the next grant has a higher fence.
        assert not (await b.describe(name)).held
        again = await b.acquire(name, ttl=5)
        assert again.fence > lease.fence
        await again.release()
        with pytest.raises(LeaseLost):
            lease.check()  # released: no longer to be relied on


async def test_waiting_acquire_gets_the_lock_when_the_holder_releases(broker, name):
    async with AsyncClient(broker.address) as a, AsyncClient(broker.address) as b:
        holder = await a.acquire(name, ttl=10)
        waiting = asyncio.ensure_future(b.acquire(name, ttl=10, wait=20, holder="waiter"))

        async def queued():
            assert not waiting.done(), waiting
            return (await a.describe(name)).waiters >= 1

        await eventually_async(queued, what="the waiter queued")
        await holder.release()
        lease = await asyncio.wait_for(waiting, 10)
        assert lease.fence > holder.fence
        assert (await a.describe(name)).holder == "waiter"
        await lease.release()


async def test_cancelling_a_waiting_acquire_leaves_the_line(broker, name):
    async with AsyncClient(broker.address) as a, AsyncClient(broker.address) as b:
        holder = await a.acquire(name, ttl=10)
        waiting = asyncio.ensure_future(b.acquire(name, ttl=10, wait=None))

        async def waiters(n):
            return (await a.describe(name)).waiters == n

        await eventually_async(lambda: waiters(1), what="the waiter queued")
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await eventually_async(lambda: waiters(0), what="the cancelled waiter left the line")
        await holder.release()
        assert not (await a.describe(name)).held, "a cancelled waiter was granted the lock"


async def test_kept_alive_beyond_several_ttls_over_one_stream(broker, name):
    async with AsyncClient(broker.address) as a, AsyncClient(broker.address) as b:
        leases = [await a.acquire(f"{name}/{i}", ttl=TTL) for i in range(3)]
        first_deadline = leases[0].deadline
        # Real time must pass for renewals to matter: 6 TTLs.
        await asyncio.sleep(6 * TTL)
        for lease in leases:
            assert not lease.is_lost(), lease
            assert (await b.describe(lease.name)).fence == lease.fence
        assert leases[0].deadline > first_deadline
        for lease in leases:
            await lease.release()


async def test_lost_callback_and_wait_lost_when_the_broker_dies(own_broker, name):
    async with AsyncClient(own_broker.address) as c:
        lease = await c.acquire(name, ttl=TTL)
        reasons = []
        called = asyncio.Event()

        @lease.on_lost
        async def record(reason):  # a coroutine callback runs as a task
            reasons.append(reason)
            called.set()

        assert await lease.wait_lost(3 * TTL) is None  # kept alive meanwhile
        own_broker.kill()
        killed = time.monotonic()
        assert await lease.wait_lost(TTL + 2.0) is LossReason.DEADLINE_PASSED
        # The local deadline comes before the broker could expire the lease.
        assert time.monotonic() - killed <= TTL + 0.2
        await asyncio.wait_for(called.wait(), 2.0)
        assert reasons == [LossReason.DEADLINE_PASSED]
        with pytest.raises(LeaseLost):
            lease.check()
        with pytest.raises(LeaseLost):
            await lease.release()


async def test_lease_lost_to_another_holder_is_reported(broker, name):
    async with AsyncClient(broker.address) as a, AsyncClient(broker.address) as b:
        lease = await a.acquire(name, ttl=TTL)
        # Stop renewing it (as a paused process would), let it expire, and let
        # someone else take the lock.
        a._keeper.forget(lease._held)
        taken = await b.acquire(name, ttl=5, wait=5)
        assert taken.fence > lease.fence
        assert await lease.wait_lost(5) is LossReason.DEADLINE_PASSED
        with pytest.raises(LeaseLost):
            await lease.release()
        await taken.release()


async def test_campaign_leader_and_observe(broker, name):
    async with AsyncClient(broker.address) as a, AsyncClient(broker.address) as b:
        assert await a.leader(name) is None
        async with await b.observe(name) as changes:
            assert await changes.__anext__() is None
            lead = await a.campaign(name, "node-a", ttl=5)
            seen = await asyncio.wait_for(changes.__anext__(), 5)
            assert seen.value == "node-a" and seen.term == lead.fence
            assert (await b.leader(name)).value == "node-a"
            await lead.release()
            assert await asyncio.wait_for(changes.__anext__(), 5) is None


async def test_invalid_arguments_are_refused_with_the_broker_message(broker, name):
    async with AsyncClient(broker.address) as c:
        with pytest.raises(LeaseholdError) as refused:
            await c.acquire(name, ttl=0.001)
        assert refused.value.code.name == "INVALID_ARGUMENT"
        assert "ttl" in str(refused.value).lower()
        with pytest.raises(ValueError):
            await c.acquire(name, ttl=5, wait=-1)



async def test_a_dead_address_is_skipped_and_the_lease_kept_alive_on_the_next(broker, name):
    from test_failover import nobody

    dead = nobody()
    async with AsyncClient([dead, broker.address]) as c, AsyncClient(broker.address) as watcher:
        lease = await c.acquire(name, ttl=TTL)
        assert c.target == broker.address
        await asyncio.sleep(4 * TTL)  # renewals must happen: real time passes
        assert not lease.is_lost(), lease.loss_reason
        assert (await watcher.describe(name)).fence == lease.fence
        await lease.release()


async def test_a_lease_survives_the_death_of_its_broker(redis, tmp_path, name):
    from conftest import Broker

    first = Broker(tmp_path / "first.log", store=redis.url)
    second = Broker(tmp_path / "second.log", store=redis.url)
    try:
        async with AsyncClient([first.address, second.address]) as c, AsyncClient(second.address) as watcher:
            ttl = 2.0
            lease = await c.acquire(name, ttl=ttl, holder="survivor")
            granted = lease.deadline

            async def renewed_after(t):
                assert not lease.is_lost(), lease.loss_reason
                return lease.deadline > t

            await eventually_async(lambda: renewed_after(granted), ttl, "a renewal through the first broker")
            first.kill()
            killed = time.monotonic()
            # Renewed through the second: a deadline counted from a heartbeat
            # sent after the kill.
            await eventually_async(
                lambda: renewed_after(killed + ttl - lease.ttl / 10), ttl, "resumed on the second broker"
            )
            assert c.target == second.address
            d = await watcher.describe(name)
            assert d.held and d.holder == "survivor" and d.fence == lease.fence
            await lease.release()
            assert not (await watcher.describe(name)).held
    finally:
        first.stop()
        second.stop()


async def test_reconnects_and_resumes_after_the_stream_breaks(broker, name):
    from proxy import Proxy

    proxy = Proxy(broker.port)
    try:
        async with AsyncClient(proxy.address) as c:
            ttl = 2.0
            lease = await c.acquire(name, ttl=ttl)
            for cut in range(2):
                before = proxy.accepted
                proxy.cut()
                deadline = lease.deadline

                async def resumed():
                    assert not lease.is_lost(), f"lost after cut {cut}: {lease.loss_reason}"
                    return proxy.accepted > before and lease.deadline > deadline

                await eventually_async(resumed, ttl, f"resumed after cut {cut}")
            await lease.release()
    finally:
        proxy.close()
