"""Smoke test of an installed leasehold-client (a wheel or an sdist in a fresh
virtualenv): run by run-tests.sh from outside the source tree, not by pytest.

Starts a real broker ($LEASEHOLD_BIN, memory store, a free loopback port),
takes, lists and releases a lease with the synchronous and the asyncio client, and
checks that the package came from the virtualenv, not from the repository.
Usage: python smoke_installed.py LABEL
"""

import asyncio
import os
import socket
import subprocess
import sys
import time

import leasehold
from leasehold import AsyncClient, Client, NotAcquired


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_broker() -> "tuple[subprocess.Popen, str]":
    address = f"127.0.0.1:{free_port()}"
    proc = subprocess.Popen(
        [os.environ["LEASEHOLD_BIN"], "serve", "--store", "memory", "--listen", address, "--metrics-listen", "127.0.0.1:0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    # Startup only: nothing else tells when the port is bound.
    end = time.monotonic() + 20
    while True:
        if proc.poll() is not None:
            sys.exit(f"broker exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", int(address.rsplit(":", 1)[1])), timeout=0.2):
                return proc, address
        except OSError:
            if time.monotonic() > end:
                proc.kill()
                sys.exit("broker did not listen within 20 s")
            time.sleep(0.02)


def sync_round(address: str) -> int:
    with Client(address) as client, Client(address) as other:
        with client.acquire("smoke/sync", ttl=5, holder="smoke") as lease:
            lease.check()
            assert lease.fence > 0
            try:
                other.acquire("smoke/sync", ttl=5)
            except NotAcquired:
                pass
            else:
                raise AssertionError("a second holder got a held lock")
            assert client.describe("smoke/sync").holder == "smoke"
            # The installed stubs know List.
            assert [(l.name, l.fence) for l in client.list("smoke/")] == [("smoke/sync", lease.fence)]
        assert not client.describe("smoke/sync").held
        return lease.fence


async def async_round(address: str, after: int) -> None:
    async with AsyncClient(address) as client:
        async with client.acquire("smoke/sync", ttl=5, holder="smoke-async") as lease:
            lease.check()
            assert lease.fence > after, (lease.fence, after)
            assert (await client.describe("smoke/sync")).holder == "smoke-async"
            assert [l.holder async for l in client.list("smoke/", page_size=1)] == ["smoke-async"]
        assert not (await client.describe("smoke/sync")).held


def main() -> None:
    label = sys.argv[1] if len(sys.argv) > 1 else "installed package"
    where = os.path.dirname(leasehold.__file__)
    assert "site-packages" in where, f"leasehold was imported from {where}, not from the virtualenv"
    proc, address = start_broker()
    try:
        fence = sync_round(address)
        asyncio.run(async_round(address, fence))
    finally:
        proc.kill()
        proc.wait(10)
    print(f"smoke {label}: imported from {where}; acquired, listed and released, sync and asyncio")


if __name__ == "__main__":
    main()
