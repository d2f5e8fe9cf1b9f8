"""Several broker addresses: calls and the KeepAlive stream go to one
replica and move to the next only when it cannot be reached, and the leases
resume there by owner token."""

from __future__ import annotations

import threading
import time

import grpc
import pytest

from leasehold import Client, LeaseholdError, NotAcquired

from conftest import Broker, free_port
from proxy import Proxy

TTL = 0.5  # the broker's default --ttl-min


def nobody() -> str:
    """An address where nothing listens (connections are refused)."""
    return f"127.0.0.1:{free_port()}"


def test_calls_move_past_an_address_that_cannot_be_reached(broker, other, name):
    dead = nobody()
    # One comma-separated string, as a config value would give it.
    with Client(f"{dead}, {broker.address}") as client:
        assert client.targets == (dead, broker.address)
        assert client.target == dead  # nothing tried yet
        lease = client.acquire(name, ttl=TTL)
        assert client.target == broker.address
        assert broker.address in repr(client) and dead in repr(client)
        # Kept alive by a stream to the replica that answers.
        time.sleep(4 * TTL)
        assert not lease.is_lost(), lease.loss_reason
        assert other.describe(name).fence == lease.fence
        lease.release()
        assert not other.describe(name).held


def test_observe_moves_past_an_address_that_cannot_be_reached(broker, other, name):
    with Client([nobody(), broker.address]) as client:
        with client.observe(name) as changes:
            assert next(changes) is None
            assert client.target == broker.address
            leadership = other.campaign(name, "node-a", ttl=5)
            assert next(changes).term == leadership.fence
            leadership.release()


def test_a_broker_slow_to_connect_to_is_not_unreachable(broker, name):
    # 300 ms to connect (a distant broker, a TLS handshake): slow, not
    # unreachable. The client stays on it rather than skipping it.
    proxy = Proxy(broker.port, delay=0.3)
    try:
        with Client([proxy.address, nobody()]) as client:
            assert not client.describe(name).held
            assert client.target == proxy.address
    finally:
        proxy.close()


def test_refusals_do_not_move_to_the_next_address(broker, name):
    # An answer from the broker, whatever it says, is not a reason to move:
    # the request arrived (and another replica would say the same).
    with Client([broker.address, nobody()]) as client, Client(broker.address) as holder:
        with pytest.raises(LeaseholdError) as e:
            client.acquire(name, ttl=0.01)
        assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
        held = holder.acquire(name, ttl=5)
        with pytest.raises(NotAcquired):
            client.acquire(name, ttl=5)
        assert client.target == broker.address
        held.release()


def test_when_no_address_can_be_reached_the_call_fails_unavailable():
    with Client([nobody(), nobody()], timeout=5) as client:
        with pytest.raises(LeaseholdError) as e:
            client.describe("anything")
        assert e.value.code == grpc.StatusCode.UNAVAILABLE


def test_addresses_are_checked():
    with pytest.raises(ValueError):
        Client(" , ")
    with pytest.raises(ValueError):
        Client(["http://127.0.0.1:1", "https://127.0.0.1:2"])


def test_a_lease_survives_the_death_of_its_broker(redis, tmp_path, name):
    # Two brokers on one Redis, as in production; the memory store is per
    # process, so it could not hand the lease from one to the other.
    first = Broker(tmp_path / "first.log", store=redis.url)
    second = Broker(tmp_path / "second.log", store=redis.url)
    try:
        with Client([first.address, second.address]) as client, Client(second.address) as watcher:
            ttl = 2.0
            lease = client.acquire(name, ttl=ttl, holder="survivor")
            assert client.target == first.address
            lost = threading.Event()
            lease.on_lost(lambda reason: lost.set())

            # A renewal through the first broker, then kill it: no clean
            # shutdown, the KeepAlive stream just breaks.
            granted_deadline = lease.deadline
            end = time.monotonic() + ttl
            while lease.deadline <= granted_deadline:
                assert time.monotonic() < end, "never renewed through the first broker"
                time.sleep(0.02)
            first.kill()
            killed = time.monotonic()

            # Renewed through the second: a deadline counted from a heartbeat
            # sent after the kill (deadline = send time + TTL - margin).
            end = killed + ttl
            while lease.deadline <= killed + ttl - lease.ttl / 10:
                assert time.monotonic() < end and not lease.is_lost(), (
                    f"not resumed on the second broker: {lease.loss_reason}"
                )
                time.sleep(0.02)
            resumed = time.monotonic() - killed
            assert client.target == second.address
            assert resumed < ttl / 2, resumed

            # And kept there for several TTLs.
            time.sleep(2 * ttl)
            assert not lease.is_lost(), lease.loss_reason
            assert not lost.is_set()
            d = watcher.describe(name)
            assert d.held and d.holder == "survivor" and d.fence == lease.fence
            assert client.check_fence(name, lease.fence)

            lease.release()  # through the second broker
            assert not watcher.describe(name).held
            assert not lost.is_set()
    finally:
        first.stop()
        second.stop()


def test_observe_gives_up_on_a_broker_that_never_answers(broker, name):
    # 3 s to connect, for a client that waits 1 s for an answer: observe()
    # raises DEADLINE_EXCEEDED rather than hanging (the stream itself has no
    # deadline), and does not move on (the request may have arrived).
    proxy = Proxy(broker.port, delay=3.0)
    try:
        with Client([proxy.address, broker.address], timeout=1) as client:
            started = time.monotonic()
            with pytest.raises(LeaseholdError) as e:
                client.observe(name)
            assert e.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
            assert time.monotonic() - started < 2
            assert client.target == proxy.address
    finally:
        proxy.close()
