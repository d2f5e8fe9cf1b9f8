"""The Session stream against a real broker: both clients carry acquire,
release and heartbeats on one stream by default (the broker's gauges say
so), many requests share it, a cancelled or timed-out request is ended on
the broker, a broken stream fails what was in flight as a broken unary call
would and the next call opens another (on the next replica), and a broker
without the Session RPC gets unary calls and KeepAlive."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import signal
import threading
import time

import grpc
import pytest

from leasehold import AsyncClient, Client, LeaseholdError, LeaseLost, NotAcquired

from conftest import SHORT_MAX_WAIT, Broker, RedisServer, eventually, eventually_async, redis_binary
from forwarder import Forwarder
from proxy import Proxy

TTL = 0.5  # the broker's default --ttl-min


def streams_are(broker, expected, what="the broker's stream gauges"):
    eventually(lambda: broker.streams() == expected, 10.0, f"{what}: {broker.streams()} != {expected}")


async def astreams_are(broker, expected, what="the broker's stream gauges"):
    loop = asyncio.get_running_loop()

    async def check():
        return await loop.run_in_executor(None, broker.streams) == expected

    await eventually_async(check, 10.0, f"{what}: expected {expected}")


def waiters(client, name):
    return client.describe(name).waiters


def pause(proc) -> None:
    """SIGSTOP, and waits until every thread of ``proc`` is stopped: the
    signal takes effect after kill() returns, and a broker still running
    would answer the next request."""
    os.kill(proc.pid, signal.SIGSTOP)

    def stopped():
        tasks = f"/proc/{proc.pid}/task"
        states = []
        for tid in os.listdir(tasks):
            try:
                with open(f"{tasks}/{tid}/stat") as f:
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
            except FileNotFoundError:
                pass  # a thread that ended
        return all(state in ("T", "t") for state in states)

    eventually(stopped, 10.0, "the process stopped")


# -- used by default ------------------------------------------------------------


def test_acquire_heartbeats_and_release_go_on_one_session_stream(own_broker, name):
    with Client(own_broker.address) as client, Client(own_broker.address, session=False) as watcher:
        assert own_broker.streams() == (0, 0)  # nothing before the first call
        lease = client.acquire(name, ttl=TTL)
        # One Session stream, no KeepAlive stream: the heartbeats use it.
        streams_are(own_broker, (1, 0))
        # Kept alive for several TTLs by heartbeats on that stream.
        assert lease.wait_lost(4 * TTL) is None, lease.loss_reason
        assert watcher.describe(name).fence == lease.fence
        assert own_broker.streams() == (1, 0)
        lease.release()
        assert not watcher.describe(name).held
        again = client.acquire(name, ttl=TTL)
        assert again.fence > lease.fence
        again.release()
        assert client._session.opened == 1
    streams_are(own_broker, (0, 0), "closed")


async def test_the_asyncio_client_uses_one_session_stream_too(own_broker, name):
    async with AsyncClient(own_broker.address) as client, AsyncClient(own_broker.address, session=False) as watcher:
        lease = await client.acquire(name, ttl=TTL)
        await astreams_are(own_broker, (1, 0))
        assert await lease.wait_lost(4 * TTL) is None, lease.loss_reason
        assert (await watcher.describe(name)).fence == lease.fence
        await lease.release()
        assert not (await watcher.describe(name)).held
        assert client._session_.opened == 1
    await astreams_are(own_broker, (0, 0), "closed")


def test_session_false_uses_unary_calls_and_a_keepalive_stream(own_broker, name):
    with Client(own_broker.address, session=False) as client:
        lease = client.acquire(name, ttl=TTL)
        streams_are(own_broker, (0, 1))
        assert lease.wait_lost(3 * TTL) is None, lease.loss_reason
        lease.release()
        assert client._session is None


def test_refusals_are_the_same_on_the_session_and_in_unary_calls(broker, name):
    with Client(broker.address) as client, Client(broker.address, session=False) as unary:
        refusals = []
        for c in (client, unary):
            with pytest.raises(LeaseholdError) as e:
                c.acquire(name, ttl=0.001)
            refusals.append((type(e.value), e.value.code, str(e.value)))
        assert refusals[0] == refusals[1]

        held = unary.acquire(name, ttl=5, holder="the-holder")
        for c in (client, unary):
            with pytest.raises(NotAcquired) as e:
                c.acquire(name, ttl=5, wait=0.1)
            assert e.value.code == grpc.StatusCode.ABORTED and "the-holder" in str(e.value)
        held.release()

        # A lease released behind its holder's back: LeaseLost both ways.
        lost = []
        for c in (client, unary):
            lease = c.acquire(name, ttl=5)
            c.release_token(name, lease.owner_token)
            with pytest.raises(LeaseLost) as e:
                c.release_token(name, "f" * 32)
            lost.append((type(e.value), e.value.code, e.value.reason))
        assert lost[0] == lost[1]


def test_a_long_wait_keeps_its_place_on_the_session(short_wait_broker, name):
    """A wait past --max-wait is a chain of Acquire requests whose kept
    place (SessionError.place) reaches the next one: over the stream only,
    not a unary Acquire."""
    recorder = Forwarder(short_wait_broker.address)
    try:
        with Client(short_wait_broker.address) as holder_client, Client(recorder.address) as client:
            holder = holder_client.acquire(name, ttl=30)
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                waiting = pool.submit(client.acquire, name, 10, None, "patient")
                eventually(lambda: waiters(holder_client, name) == 1, 10.0, "the waiter queued")
                # Past the first --max-wait: one place all along.
                end = time.monotonic() + 1.5 * SHORT_MAX_WAIT
                while time.monotonic() < end:
                    assert not waiting.done() and waiters(holder_client, name) == 1
                    time.sleep(0.05)
                holder.release()
                lease = waiting.result(timeout=10)
            assert lease.waited > SHORT_MAX_WAIT
            assert client._max_wait == SHORT_MAX_WAIT  # learnt from the refusal, on the stream
            lease.release()
        assert recorder.calls == ["Session"]
    finally:
        recorder.close()


# -- an older broker ------------------------------------------------------------


def test_a_broker_without_the_session_rpc_gets_unary_calls_and_keepalive(own_broker, name):
    old = Forwarder(own_broker.address, session=False)
    try:
        with Client(old.address) as client, Client(own_broker.address, session=False) as other:
            lease = client.acquire(name, ttl=TTL, holder="old-broker-client")
            streams_are(own_broker, (0, 1))
            assert lease.wait_lost(3 * TTL) is None, lease.loss_reason
            with pytest.raises(NotAcquired) as e:
                other.acquire(name, ttl=5)
            assert "old-broker-client" in str(e.value)
            lease.release()
            # A waiting acquire, as a unary call.
            held = other.acquire(name, ttl=5)
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                waiting = pool.submit(client.acquire, name, 5, 10)
                eventually(lambda: waiters(other, name) == 1, 10.0, "the waiter queued")
                held.release()
                waiting.result(timeout=10).release()
        # The Session RPC was tried once, then never again.
        assert old.calls.count("Session") == 1
        assert old.calls.count("Acquire") == 2 and "KeepAlive" in old.calls
    finally:
        old.close()


async def test_an_asyncio_client_falls_back_too(own_broker, name):
    old = Forwarder(own_broker.address, session=False)
    try:
        async with AsyncClient(old.address) as client:
            lease = await client.acquire(name, ttl=TTL)
            await astreams_are(own_broker, (0, 1))
            assert await lease.wait_lost(3 * TTL) is None, lease.loss_reason
            await lease.release()
        assert old.calls.count("Session") == 1 and "Acquire" in old.calls
    finally:
        old.close()


# -- many requests on one stream -------------------------------------------------


def test_many_threads_acquire_over_the_one_stream(own_broker, name):
    with Client(own_broker.address) as client:
        lock = threading.Lock()
        holding = []
        fences = []

        def contend(i):
            lease = client.acquire(f"{name}/shared", ttl=10, wait=60, holder=f"t{i}")
            with lock:
                assert not holding, "two holders at once"
                holding.append(i)
                fences.append(lease.fence)
            time.sleep(0.005)
            with lock:
                holding.remove(i)
            lease.release()
            return lease.fence

        def alone(i):
            lease = client.acquire(f"{name}/{i}", ttl=10)
            return lease

        with concurrent.futures.ThreadPoolExecutor(40) as pool:
            shared = [pool.submit(contend, i) for i in range(20)]
            own = [pool.submit(alone, i) for i in range(40)]
            leases = [f.result(timeout=60) for f in own]
            [f.result(timeout=60) for f in shared]
        assert fences == sorted(fences) and len(set(fences)) == 20
        assert len({lease.fence for lease in leases}) == 40
        assert client._session.opened == 1
        streams_are(own_broker, (1, 0))
        for lease in leases:
            lease.release()


async def test_many_tasks_acquire_over_the_one_stream(own_broker, name):
    async with AsyncClient(own_broker.address) as client:
        order = []

        async def contend(i):
            lease = await client.acquire(f"{name}/shared", ttl=10, wait=60)
            order.append(lease.fence)
            await asyncio.sleep(0.005)
            await lease.release()

        own = asyncio.gather(*[client.acquire(f"{name}/{i}", ttl=10) for i in range(200)])
        await asyncio.wait_for(asyncio.gather(own, *[contend(i) for i in range(20)]), 60)
        leases = own.result()
        assert len({lease.fence for lease in leases}) == 200
        assert order == sorted(order) and len(order) == 20
        assert client._session_.opened == 1
        await astreams_are(own_broker, (1, 0))
        await asyncio.gather(*[lease.release() for lease in leases])


# -- giving up: cancellation and deadlines ----------------------------------------


async def test_a_cancelled_waiting_acquire_gives_up_its_place(broker, name):
    async with AsyncClient(broker.address) as holder_client, AsyncClient(broker.address) as a, \
            AsyncClient(broker.address) as b:
        holder = await holder_client.acquire(name, ttl=30)

        def in_line(n):
            async def check():
                return (await holder_client.describe(name)).waiters == n

            return check

        first = asyncio.ensure_future(a.acquire(name, ttl=10, wait=None, holder="a"))
        await eventually_async(in_line(1), 10.0, "a queued")
        second = asyncio.ensure_future(b.acquire(name, ttl=10, wait=None, holder="b"))
        await eventually_async(in_line(2), 10.0, "b queued behind a")
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        # The cancel reached the broker: a left the line at once.
        await eventually_async(in_line(1), 5.0, "a's place given up")
        await holder.release()
        lease = await asyncio.wait_for(second, 10)
        assert (await holder_client.describe(name)).holder == "b"
        await lease.release()
        # a's stream goes on.
        (await a.acquire(name, ttl=5)).check()
        assert a._session_.opened == 1


def test_closing_a_client_ends_its_waiting_acquire_and_its_place(broker, name):
    with Client(broker.address) as holder_client, Client(broker.address) as b, \
            concurrent.futures.ThreadPoolExecutor(2) as pool:
        holder = holder_client.acquire(name, ttl=30)
        a = Client(broker.address)
        first = pool.submit(a.acquire, name, 10, None, "a")
        eventually(lambda: waiters(holder_client, name) == 1, 10.0, "a queued")
        second = pool.submit(b.acquire, name, 10, None, "b")
        eventually(lambda: waiters(holder_client, name) == 2, 10.0, "b queued behind a")
        a.close()
        with pytest.raises(LeaseholdError) as e:
            first.result(timeout=10)
        assert e.value.code == grpc.StatusCode.CANCELLED
        eventually(lambda: waiters(holder_client, name) == 1, 5.0, "a's place given up")
        holder.release()
        second.result(timeout=10).release()


def test_a_hung_broker_fails_the_request_at_its_deadline(own_broker, name):
    with Client(own_broker.address, timeout=1) as client, Client(own_broker.address, session=False) as watcher:
        client.acquire(f"{name}/warm", ttl=5).release()  # the stream is open
        pause(own_broker.proc)
        try:
            started = time.monotonic()
            with pytest.raises(LeaseholdError) as e:
                client.acquire(name, ttl=5)
            elapsed = time.monotonic() - started
        finally:
            os.kill(own_broker.proc.pid, signal.SIGCONT)
        assert e.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
        assert 1.0 <= elapsed < 5.0, elapsed
        # Whether the broker granted it before it read the cancel or not,
        # nobody holds it in the end.
        eventually(lambda: not watcher.describe(name).held, 10.0, "the timed-out acquire left nothing held")
        # The stream survived the pause.
        client.acquire(name, ttl=5).release()
        assert client._session.opened == 1


async def test_a_hung_broker_fails_an_asyncio_request_at_its_deadline(own_broker, name):
    async with AsyncClient(own_broker.address, timeout=1) as client:
        await (await client.acquire(f"{name}/warm", ttl=5)).release()
        pause(own_broker.proc)
        try:
            started = time.monotonic()
            with pytest.raises(LeaseholdError) as e:
                await client.acquire(name, ttl=5)
            elapsed = time.monotonic() - started
        finally:
            os.kill(own_broker.proc.pid, signal.SIGCONT)
        assert e.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
        assert 1.0 <= elapsed < 5.0, elapsed

        async def free():
            return not (await client.describe(name)).held

        await eventually_async(free, 10.0, "the timed-out acquire left nothing held")
        await (await client.acquire(name, ttl=5)).release()


def test_the_timeout_bounds_the_request_on_the_broker(tmp_path, name):
    """The client's timeout is the request's timeout_ms: a broker whose
    store hangs (longer than its --store-timeout allows the client to
    wait) ends the request itself, and says so."""
    binary = redis_binary()
    if binary is None:
        pytest.skip("redis-server is not on the PATH (nor named by LEASEHOLD_REDIS_SERVER)")
    redis = RedisServer(binary, tmp_path / "redis.log")
    broker = Broker(tmp_path / "broker.log", store=redis.url, args=["--store-timeout", "30s"])
    try:
        with Client(broker.address, timeout=1) as client:
            lease = client.acquire(name, ttl=10)
            pause(redis.proc)
            try:
                started = time.monotonic()
                with pytest.raises(LeaseholdError) as e:
                    client.acquire(f"{name}/other", ttl=5)
                elapsed = time.monotonic() - started
            finally:
                redis.proc.send_signal(signal.SIGCONT)
            assert e.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
            # The broker's answer (its reason and facts), not the local deadline.
            assert e.value.reason == "REQUEST_TIMEOUT", e.value
            assert e.value.metadata["timeout_ms"] == "1000", e.value.metadata
            assert 0.9 <= elapsed < 3.0, elapsed
            lease.release()
    finally:
        broker.stop()
        redis.stop()


# -- a broken stream ---------------------------------------------------------------


def test_a_broken_stream_fails_the_waiting_acquire_and_the_next_call_opens_another(broker, name):
    proxy = Proxy(broker.port)
    try:
        with Client(proxy.address) as client, Client(broker.address) as holder_client, \
                concurrent.futures.ThreadPoolExecutor(1) as pool:
            holder = holder_client.acquire(name, ttl=30)
            waiting = pool.submit(client.acquire, name, 10, 30)
            eventually(lambda: waiters(holder_client, name) == 1, 10.0, "the waiter queued")
            proxy.cut()
            with pytest.raises(LeaseholdError) as e:
                waiting.result(timeout=10)
            # As a unary call whose connection broke: UNAVAILABLE, not sent again.
            assert e.value.code == grpc.StatusCode.UNAVAILABLE
            eventually(lambda: waiters(holder_client, name) == 0, 10.0, "the broker ended the wait")
            holder.release()
            client.acquire(name, ttl=5).release()
            assert client._session.opened == 2
    finally:
        proxy.close()


@pytest.fixture
def two_brokers(redis, tmp_path):
    """Two brokers sharing one redis-server, as replicas in production."""
    first = Broker(tmp_path / "first.log", store=redis.url)
    second = Broker(tmp_path / "second.log", store=redis.url)
    yield first, second
    first.stop()
    second.stop()


def test_a_broker_killed_mid_wait_then_the_client_fails_over(two_brokers, name):
    first, second = two_brokers
    with Client([first.address, second.address]) as client, Client(second.address) as watcher, \
            concurrent.futures.ThreadPoolExecutor(1) as pool:
        kept = client.acquire(f"{name}/kept", ttl=2.0)
        holder = watcher.acquire(name, ttl=30, holder="holder")
        waiting = pool.submit(client.acquire, name, 10, 30, "waiter")
        eventually(lambda: waiters(watcher, name) == 1, 10.0, "the waiter queued on the first broker")
        first.kill()
        with pytest.raises(LeaseholdError) as e:
            waiting.result(timeout=10)
        assert e.value.code == grpc.StatusCode.UNAVAILABLE
        # The next call goes to the second broker, on a new stream there
        # (the watcher's broker: its local waiters).
        waiting = pool.submit(client.acquire, name, 10, 30, "waiter")
        eventually(lambda: watcher.describe(name).local_waiters == 1, 10.0, "the waiter queued on the second broker")
        assert client.target == second.address
        holder.release()
        lease = waiting.result(timeout=10)
        assert watcher.describe(name).holder == "waiter"
        # The lease taken on the first broker's stream is kept alive on the new one.
        assert kept.wait_lost(2.0) is None, kept.loss_reason
        assert watcher.describe(f"{name}/kept").fence == kept.fence
        streams_are(second, (2, 0))  # the client's and the watcher's
        lease.release()
        kept.release()


async def test_an_asyncio_client_fails_over_after_its_broker_is_killed_mid_wait(two_brokers, name):
    first, second = two_brokers
    async with AsyncClient([first.address, second.address]) as client, \
            AsyncClient(second.address) as watcher:
        kept = await client.acquire(f"{name}/kept", ttl=2.0)
        holder = await watcher.acquire(name, ttl=30)

        def in_line(n):
            async def check():
                return (await watcher.describe(name)).waiters == n

            return check

        waiting = asyncio.ensure_future(client.acquire(name, ttl=10, wait=30))
        await eventually_async(in_line(1), 10.0, "queued on the first broker")
        first.kill()
        with pytest.raises(LeaseholdError) as e:
            await asyncio.wait_for(waiting, 10)
        assert e.value.code == grpc.StatusCode.UNAVAILABLE
        waiting = asyncio.ensure_future(client.acquire(name, ttl=10, wait=30))

        async def local():
            return (await watcher.describe(name)).local_waiters == 1

        await eventually_async(local, 10.0, "queued on the second broker")
        assert client.target == second.address
        await holder.release()
        lease = await asyncio.wait_for(waiting, 10)
        assert await kept.wait_lost(2.0) is None, kept.loss_reason
        await astreams_are(second, (2, 0))  # the client's and the watcher's
        await lease.release()
        await kept.release()
