"""The client against a real broker (memory store)."""

from __future__ import annotations

import concurrent.futures
import queue
import threading
import time

import pytest

from leasehold import Client, LeaseholdError, LeaseLost, LossReason, NotAcquired

from proxy import Proxy

TTL = 0.5  # the broker's default --ttl-min


def test_acquire_gives_a_fence_and_a_second_acquire_is_refused(client, other, name):
    lease = client.acquire(name, ttl=5, holder="first")
    assert lease.fence > 0
    assert lease.name == name
    with pytest.raises(NotAcquired) as refused:
        other.acquire(name, ttl=5, holder="second")
    # The broker's message names the holder; the code is kept.
    assert "first" in str(refused.value)
    assert refused.value.code.name == "ABORTED"
    lease.release()


def test_fences_strictly_increase_across_cycles(client, other, name):
    fences = []
    for i in range(6):
        c = client if i % 2 == 0 else other
        lease = c.acquire(name, ttl=5)
        fences.append(lease.fence)
        lease.release()
    assert all(a < b for a, b in zip(fences, fences[1:])), fences


def test_waiting_acquire_gets_the_lock_when_the_holder_releases(client, other, name):
    holder = client.acquire(name, ttl=10)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(other.acquire, name, 10, 20, "waiter")
        # Wait (on a condition, with a deadline) until the broker has queued
        # the waiter, so the release below really is what wakes it.
        end = time.monotonic() + 10
        while client.describe(name).waiters < 1:
            assert not waiting.done(), waiting.exception()
            assert time.monotonic() < end, "the waiter never queued"
            time.sleep(0.01)
        assert not waiting.done()
        holder.release()
        lease = waiting.result(timeout=10)
    assert lease.fence > holder.fence
    assert client.describe(name).holder == "waiter"
    lease.release()


def test_kept_alive_beyond_several_ttls(client, other, name):
    lease = client.acquire(name, ttl=TTL)
    first_deadline = lease.deadline
    start = time.monotonic()
    # The passing of time is what is tested here: 5 TTLs.
    while time.monotonic() - start < 5 * TTL:
        time.sleep(TTL / 4)
        d = other.describe(name)
        assert d.held, f"lease expired after {time.monotonic() - start:.2f}s"
        assert d.fence == lease.fence
        assert not lease.is_lost(), lease.loss_reason
    assert lease.deadline > first_deadline + 3 * TTL
    # Deadline rule: never later than last send + TTL - margin, so at most a
    # TTL ahead of now.
    assert lease.deadline <= time.monotonic() + TTL
    lease.release()


def test_more_leases_than_one_heartbeat_names_are_kept_alive(client, other, name):
    # The broker's default --max-stream-leases is 1,000: 1,200 leases go in
    # two heartbeats a beat (in one, it is refused and every lease is lost).
    leases = [client.acquire(f"{name}/{i}", ttl=2.0) for i in range(1200)]
    time.sleep(6.0)  # the passing of time is what is tested: 3 TTLs
    assert [lease for lease in leases if lease.is_lost()] == []
    for i in (0, 999, 1000, 1199):
        assert other.describe(f"{name}/{i}").held
    for lease in leases:
        lease.release()


def test_lost_callback_fires_when_the_broker_dies(own_broker, name):
    with Client(own_broker.address) as c:
        lease = c.acquire(name, ttl=TTL)
        lost = threading.Event()
        reasons = []

        @lease.on_lost
        def record(reason):
            reasons.append(reason)
            lost.set()

        # Kept alive while the broker lives (the callback must not fire).
        assert not lost.wait(3 * TTL)
        assert not lease.is_lost()
        own_broker.kill()
        killed = time.monotonic()
        assert lost.wait(TTL + 2.0), "lost callback did not fire"
        elapsed = time.monotonic() - killed
        # The local deadline comes before the broker could expire the lease.
        assert elapsed <= TTL, elapsed
        assert reasons == [LossReason.DEADLINE_PASSED]
        assert lease.is_lost()
        with pytest.raises(LeaseLost):
            lease.check()


def test_reconnects_and_resumes_after_the_stream_breaks(broker, other, name):
    proxy = Proxy(broker.port)
    try:
        with Client(proxy.address) as c:
            ttl = 2.0
            lease = c.acquire(name, ttl=ttl)
            for cut in range(3):
                before = proxy.accepted
                proxy.cut()
                # A new connection means the keeper reconnected.
                assert proxy.wait_accepted(before + 1, ttl), "no reconnection"
                deadline = lease.deadline
                end = time.monotonic() + ttl
                while lease.deadline <= deadline:  # a renewal on the new stream
                    assert time.monotonic() < end and not lease.is_lost(), f"not resumed after cut {cut}"
                    time.sleep(0.02)
            assert other.describe(name).fence == lease.fence
            assert not lease.is_lost()
            lease.release()
    finally:
        proxy.close()


def test_release_frees_the_lock_and_context_manager_releases(client, other, name):
    lease = client.acquire(name, ttl=5)
    assert other.describe(name).held
    lease.release()
    assert not other.describe(name).held
    assert lease.is_lost() and lease.released
    lease.release()  # a second release does nothing

    with client.acquire(name, ttl=5) as inside:
        assert other.describe(name).fence == inside.fence
    assert not other.describe(name).held
    # Once released, the lock is free for someone else.
    other.acquire(name, ttl=5).release()


def test_context_manager_releases_when_the_block_raises(client, other, name):
    with pytest.raises(RuntimeError):
        with client.acquire(name, ttl=5):
            raise RuntimeError("boom")
    assert not other.describe(name).held


def test_check_fence(client, other, name):
    lease = client.acquire(name, ttl=5)
    assert other.check_fence(name, lease.fence)
    assert not other.check_fence(name, lease.fence - 1)
    lease.release()
    check = other.check_fence(name, lease.fence)
    assert not check
    assert check.current_fence == 0


def test_repr_never_contains_the_token(client, name):
    lease = client.acquire(name, ttl=5)
    token = lease.owner_token
    assert len(token) == 32
    text = repr(lease) + str(lease)
    assert token not in text
    assert token[:4] in text  # enough to tell leases apart
    assert name in text and str(lease.fence) in text
    lease.release()
    assert token not in repr(lease)


def test_repr_never_contains_the_bearer_token(broker):
    bearer = "s3cret-bearer-token-" + "z" * 16
    # Not connected to anything that checks tokens: only what it shows.
    with Client(broker.address, token=bearer) as c:
        text = repr(c) + str(c)
        assert bearer not in text and bearer[:4] not in text
        assert "token=<redacted>" in text and broker.address in text
    with Client(broker.address) as plain:
        assert "token" not in repr(plain)


def test_an_invalid_bearer_token_is_refused_without_showing_it():
    for bad in ("", "two words", "line\nbreak", "caf\u00e9"):
        with pytest.raises(ValueError) as e:
            Client("127.0.0.1:1", token=bad)
        assert not bad or bad not in str(e.value)


def test_release_of_a_lease_lost_to_another_holder(client, other, name):
    # Someone else frees the lease with its token (as an expiry would) and
    # takes the name: the holder must hear it and must not free the thief's.
    lease = client.acquire(name, ttl=5)
    lost = threading.Event()
    lease.on_lost(lambda reason: lost.set())
    other.release_token(name, lease.owner_token)
    thief = other.acquire(name, ttl=5)
    # The next heartbeat hears LOST (another owner holds it now).
    assert lost.wait(5 / 3 + 2), "loss not reported"
    assert lease.loss_reason in (LossReason.NOT_OWNER, LossReason.STORE_LOST, LossReason.EXPIRED)
    with pytest.raises(LeaseLost):
        lease.release()
    assert other.describe(name).fence == thief.fence  # the thief's lease is untouched
    thief.release()


def test_campaign_and_leader(client, other, name):
    leadership = client.campaign(name, "node-a", ttl=5)
    leader = other.leader(name)
    assert leader is not None and leader.value == "node-a" and leader.term == leadership.fence
    with pytest.raises(NotAcquired):
        other.campaign(name, "node-b", ttl=5)
    leadership.release()
    assert other.leader(name) is None


class Collector:
    """Iterates over an Observation on a thread of its own, so the test can
    wait for each change with a deadline."""

    END = object()

    def __init__(self, observation):
        self.observation = observation
        self.items: "queue.Queue" = queue.Queue()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            for leader in self.observation:
                self.items.put(leader)
        except Exception as e:
            self.items.put(e)
        self.items.put(self.END)

    def next(self, timeout=5.0):
        return self.items.get(timeout=timeout)


def test_observe_streams_every_change_of_leadership(client, other, name):
    changes = Collector(other.observe(name))
    assert changes.next() is None  # as it is now: no leader
    a = client.campaign(name, "node-a", ttl=5)
    leader = changes.next()
    assert leader.value == "node-a" and leader.term == a.fence and leader.remaining > 0
    a.release()  # resigns: observers hear it at once
    assert changes.next() is None
    b = client.campaign(name, "node-b", ttl=5)
    leader = changes.next()
    assert leader.value == "node-b" and leader.term == b.fence > a.fence
    assert other.leader(name).term == b.fence
    # Cancelling (from another thread) ends the iteration cleanly.
    changes.observation.cancel()
    assert changes.next() is Collector.END
    changes.thread.join(5)
    b.release()


def test_closing_the_client_ends_its_observations(broker, name):
    c = Client(broker.address)
    changes = Collector(c.observe(name))
    assert changes.next() is None
    c.close()
    assert changes.next() is Collector.END  # not an error


def test_observe_raises_when_its_broker_dies(own_broker, name):
    with Client(own_broker.address) as c:
        with c.observe(name) as changes:
            assert next(changes) is None
            own_broker.kill()
            with pytest.raises(LeaseholdError) as e:
                next(changes)
            assert e.value.code.name == "UNAVAILABLE"
        # Observing again fails the same way while no replica is reachable.
        with pytest.raises(LeaseholdError) as e:
            c.observe(name)
        assert e.value.code.name == "UNAVAILABLE"


def test_invalid_ttl_is_refused_with_the_broker_message(client, name):
    from leasehold import LeaseholdError

    with pytest.raises(LeaseholdError) as refused:
        client.acquire(name, ttl=0.01)
    assert refused.value.code.name == "INVALID_ARGUMENT"
    assert refused.value.details
