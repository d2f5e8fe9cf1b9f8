"""Listing against a real broker: List's pages (list_page) and the walk over
them (list), sync and asyncio; the page-size refusal; an administrator's
listing of every tenant (`serve --auth-file`); a walk on a Redis store."""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import threading
import time

import grpc
import pytest

from leasehold import AsyncClient, Client, LeaseholdError, ListPage, Listed

from conftest import Broker, eventually, eventually_async

TTL = 10.0


class Scene:
    """Under ``prefix``: two locks (``a``, ``b``) and a semaphore with two
    of its three permits taken; a caller waiting in ``a``'s line; and a
    lock outside the prefix whose name starts like it."""

    def __init__(self, base: str):
        self.prefix = f"{base}/"
        self.a = f"{base}/a"
        self.b = f"{base}/b"
        self.sem = f"{base}/sem"
        self.outside = f"{base}-outside/c"

    def check(self, listed, a, b) -> None:
        """``listed`` (entries) is exactly the scene's names under the
        prefix, each as it is: ``a`` and ``b`` are the leases on them."""
        by_name = {l.name: l for l in listed}
        assert sorted(by_name) == [self.a, self.b, self.sem], listed
        assert len(listed) == 3, listed
        for lease, holder, waiters in ((a, "holder-a", 1), (b, "holder-b", 0)):
            l = by_name[lease.name]
            assert isinstance(l, Listed)
            assert l.held and l.holder == holder and l.fence == lease.fence, l
            assert l.waiters == waiters, l
            assert l.permits_held == 0
            assert l.tenant == "@root"
            assert 0 < l.remaining <= TTL and l.ttl == TTL
            assert abs(l.granted_at_unix - time.time()) < 60
            assert l.lock_delay_remaining == 0
        sem = by_name[self.sem]
        assert not sem.held and sem.permits_held == 2 and sem.waiters == 0, sem


def unique(what: str) -> str:
    return f"py-list/{what}/{time.monotonic_ns()}"


def test_list_page_and_list_show_the_names_under_a_prefix(broker):
    scene = Scene(unique("scene"))
    with Client(broker.address) as client, Client(broker.address) as other:
        a = client.acquire(scene.a, ttl=TTL, holder="holder-a")
        b = client.acquire(scene.b, ttl=TTL, holder="holder-b")
        permits = [client.acquire(scene.sem, ttl=TTL, limit=3, holder=f"p{i}") for i in range(2)]
        outside = client.acquire(scene.outside, ttl=TTL)
        got = []
        waiter = threading.Thread(target=lambda: got.append(other.acquire(scene.a, ttl=TTL, wait=30, holder="waiter")))
        waiter.start()
        try:
            eventually(lambda: client.describe(scene.a).waiters == 1, what="the waiter queued")

            # One page of the default size holds them all (memory store: in
            # name order, and the walk is done).
            page = client.list_page(scene.prefix)
            assert isinstance(page, ListPage)
            assert page.next_page_token == ""
            assert [l.name for l in page.locks] == [scene.a, scene.b, scene.sem]
            scene.check(page.locks, a, b)

            # The walk over every page.
            scene.check(list(client.list(prefix=scene.prefix)), a, b)

            # Pages of one name: the tokens lead over all of them.
            pages, token, entries = 0, "", []
            while True:
                page = client.list_page(scene.prefix, page_size=1, page_token=token)
                pages += 1
                assert len(page.locks) <= 1
                entries += page.locks
                if not page.next_page_token:
                    break
                token = page.next_page_token
            assert pages >= 3
            scene.check(entries, a, b)
            scene.check(list(client.list(scene.prefix, page_size=1)), a, b)

            # The name outside the prefix is there under its own.
            assert [l.name for l in client.list(f"{scene.prefix[:-1]}-outside/")] == [scene.outside]
        finally:
            a.release()
            waiter.join(30)
        assert got and got[0].fence > a.fence
        got[0].release()
        for lease in (b, outside, *permits):
            lease.release()
        # Free names are left out.
        assert list(client.list(scene.prefix)) == []


def test_a_page_size_above_the_maximum_is_a_bad_argument(broker):
    with Client(broker.address) as client:
        with pytest.raises(LeaseholdError) as e:
            client.list_page("py-list/", page_size=5000)
        assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert e.value.reason == "BAD_ARGUMENT"
        assert e.value.metadata["argument"] == "page_size"
        assert e.value.metadata.get("max_page_size") == "1000"
        assert str(e.value).startswith("page_size=5000: ")
        # The walk raises it at its first step.
        with pytest.raises(LeaseholdError) as e:
            next(client.list(page_size=5000))
        assert e.value.metadata["argument"] == "page_size"
        # A bad prefix names the prefix.
        with pytest.raises(LeaseholdError) as e:
            client.list_page("bad name with spaces")
        assert e.value.reason == "BAD_ARGUMENT" and e.value.metadata["argument"] == "prefix"
        # Caught here: a page size no request can carry.
        with pytest.raises(ValueError):
            client.list_page(page_size=-1)


async def test_the_async_client_lists_too(broker):
    scene = Scene(unique("async"))
    async with AsyncClient(broker.address) as client, AsyncClient(broker.address) as other:
        a = await client.acquire(scene.a, ttl=TTL, holder="holder-a")
        b = await client.acquire(scene.b, ttl=TTL, holder="holder-b")
        permits = [await client.acquire(scene.sem, ttl=TTL, limit=3) for _ in range(2)]
        outside = await client.acquire(scene.outside, ttl=TTL)
        waiting = asyncio.ensure_future(other.acquire(scene.a, ttl=TTL, wait=30, holder="waiter"))

        async def queued():
            return (await client.describe(scene.a)).waiters == 1

        await eventually_async(queued, what="the waiter queued")
        page = await client.list_page(scene.prefix)
        assert page.next_page_token == ""
        scene.check(page.locks, a, b)
        scene.check([l async for l in client.list(scene.prefix, page_size=1)], a, b)
        with pytest.raises(LeaseholdError) as e:
            await client.list_page(scene.prefix, page_size=5000)
        assert e.value.reason == "BAD_ARGUMENT" and e.value.metadata["argument"] == "page_size"

        await a.release()
        (await asyncio.wait_for(waiting, 10)).check()
        for lease in (b, outside, *permits):
            await lease.release()


def sha256_hex(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def test_an_admin_lists_every_tenants_names(tmp_path):
    tokens = {t: secrets.token_urlsafe(24) for t in ("payments", "search", "ops")}
    auth = tmp_path / "auth"
    auth.write_text(
        f"payments use token:sha256:{sha256_hex(tokens['payments'])}\n"
        f"search use token:sha256:{sha256_hex(tokens['search'])}\n"
        f"ops use,admin token:sha256:{sha256_hex(tokens['ops'])}\n"
    )
    b = Broker(tmp_path / "broker.log", ["--auth-file", str(auth)])
    name = unique("tenants") + "/ledger"
    prefix = name.rsplit("/", 1)[0] + "/"
    try:
        with Client(b.address, token=tokens["payments"]) as payments, Client(
            b.address, token=tokens["search"]
        ) as search, Client(b.address, token=tokens["ops"]) as ops:
            mine = payments.acquire(name, ttl=TTL, holder="payments-job")
            theirs = search.acquire(name, ttl=TTL, holder="search-job")

            # Every tenant's: the same name twice, told apart by tenant.
            every = sorted(ops.list(prefix, tenant="*"), key=lambda l: l.tenant)
            assert [(l.tenant, l.name, l.holder, l.fence) for l in every] == [
                ("payments", name, "payments-job", mine.fence),
                ("search", name, "search-job", theirs.fence),
            ]
            # Page by page too.
            assert sorted(l.tenant for l in ops.list(prefix, tenant="*", page_size=1)) == ["payments", "search"]
            # One tenant's, by an admin; the caller's own, by anyone.
            assert [l.holder for l in ops.list(prefix, tenant="payments")] == ["payments-job"]
            assert [(l.tenant, l.holder) for l in search.list(prefix)] == [("search", "search-job")]
            assert list(ops.list(prefix)) == []  # the admin's own namespace

            # A use-only credential may not look further than its own.
            for tenant in ("*", "payments"):
                with pytest.raises(LeaseholdError) as e:
                    search.list_page(prefix, tenant=tenant)
                assert e.value.code == grpc.StatusCode.PERMISSION_DENIED
            mine.release()
            theirs.release()
    finally:
        b.stop()


def test_a_walk_on_redis_covers_every_name(redis, tmp_path):
    b = Broker(tmp_path / "broker.log", store=redis.url)
    base = unique("redis")
    names = [f"{base}/{i:02}" for i in range(12)]
    try:
        with Client(b.address) as client:
            leases = [client.acquire(n, ttl=TTL, holder="r") for n in names]
            # In SCAN's order, and a name may come twice: the caller keeps
            # one entry per (tenant, name).
            for size in (1, 5, 0):
                seen = {(l.tenant, l.name): l for l in client.list(f"{base}/", page_size=size)}
                assert sorted(n for _, n in seen) == names
                assert all(seen[("@root", l.name)].fence == l.fence for l in leases)
            for lease in leases:
                lease.release()
    finally:
        b.stop()
