"""Fixtures: a real broker process (memory store) on a free loopback port;
a real redis-server, for brokers that share a store."""

from __future__ import annotations

import asyncio
import inspect
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Optional, Sequence

import pytest

from leasehold import Client

REPO = Path(__file__).resolve().parents[3]
DEFAULT_BIN = REPO / "target" / "debug" / "leasehold"


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    """Runs ``async def`` tests in a fresh event loop (no plugin needed),
    bounded so that a hung test fails instead of hanging the run."""
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    args = {a: pyfuncitem.funcargs[a] for a in pyfuncitem._fixtureinfo.argnames}
    asyncio.run(asyncio.wait_for(pyfuncitem.obj(**args), 120))
    return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def broker_binary() -> str:
    binary = os.environ.get("LEASEHOLD_BIN") or str(DEFAULT_BIN)
    if not os.access(binary, os.X_OK):
        pytest.fail(f"broker binary {binary} not found: build it (cargo build --bin leasehold) or set LEASEHOLD_BIN")
    return binary


class Broker:
    """A `leasehold serve --store memory` process (``store``: another store
    URL); ``args`` are more serve flags (TLS files, an auth file); ``port``:
    a given one (a broker restarted where it was), else a free one."""

    def __init__(self, log_path: Path, args: Sequence[str] = (), store: str = "memory", port: Optional[int] = None):
        binary = broker_binary()
        self.port = free_port() if port is None else port
        self.address = f"127.0.0.1:{self.port}"
        self._log_path = log_path
        self._metrics_address: Optional[str] = None
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            [binary, "serve", "--store", store, "--listen", self.address, "--metrics-listen", "127.0.0.1:0", *args],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self._wait_ready(log_path)

    def _wait_ready(self, log_path: Path, timeout: float = 20.0) -> None:
        # Polling with a short sleep is for startup only: nothing else tells
        # us when the port is bound.
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                pytest.fail(f"broker exited with {self.proc.returncode}: {log_path.read_text(errors='replace')}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.02)
        self.stop()
        pytest.fail(f"broker did not listen on {self.address} within {timeout}s")

    def metric(self, name: str) -> float:
        """The value of an unlabelled metric (a gauge: ``leasehold_session_streams``)
        on the broker's Prometheus endpoint, whose port the broker logs at
        startup ("metrics=127.0.0.1:PORT")."""
        if self._metrics_address is None:
            end = time.monotonic() + 10.0
            while True:
                found = re.search(r"metrics=(127\.0\.0\.1:\d+)", self._log_path.read_text(errors="replace"))
                if found:
                    self._metrics_address = found.group(1)
                    break
                assert time.monotonic() < end, "the broker did not log its metrics address"
                time.sleep(0.02)  # startup only: the line comes with "serving"
        with urllib.request.urlopen(f"http://{self._metrics_address}/metrics", timeout=5) as r:
            text = r.read().decode()
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == name:
                return float(parts[1])
        raise AssertionError(f"no metric {name} on {self.address}")

    def streams(self):
        """(Session streams, KeepAlive streams) open on the broker now."""
        return int(self.metric("leasehold_session_streams")), int(self.metric("leasehold_keepalive_streams"))

    def kill(self) -> None:
        """SIGKILL: no clean shutdown, streams just break."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def terminate(self, timeout: float = 20.0) -> None:
        """SIGTERM, and waits for the exit: a graceful shutdown (waits end
        with UNAVAILABLE, streams are told to go elsewhere), as Kubernetes
        does on a rolling restart. Fails the test if the broker did not exit
        cleanly within ``timeout``."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            pytest.fail(f"broker {self.address} did not exit within {timeout} s of SIGTERM")
        assert code == 0, f"broker {self.address} exited with {code} after SIGTERM"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self._log.close()


class RedisServer:
    """A redis-server process on a free loopback port, without persistence,
    for brokers that must share a store (the memory store is per process)."""

    def __init__(self, binary: str, log_path: Path):
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/"
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        end = time.monotonic() + 20.0
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                pytest.fail(f"redis-server exited with {self.proc.returncode}: {log_path.read_text(errors='replace')}")
            # Startup only: redis-server answers PING once it is ready.
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(64).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            time.sleep(0.02)
        self.stop()
        pytest.fail(f"redis-server did not answer on port {self.port} within 20s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self._log.close()


def redis_binary() -> Optional[str]:
    """``$LEASEHOLD_REDIS_SERVER``, or ``redis-server`` on the PATH."""
    return os.environ.get("LEASEHOLD_REDIS_SERVER") or shutil.which("redis-server")


@pytest.fixture
def redis(tmp_path):
    """A redis-server for one test; the test is skipped without one."""
    binary = redis_binary()
    if binary is None:
        pytest.skip(
            "redis-server is not on the PATH (nor named by LEASEHOLD_REDIS_SERVER): two brokers "
            "need a shared store to hand leases over (scripts/test installs it)"
        )
    r = RedisServer(binary, tmp_path / "redis.log")
    yield r
    r.stop()


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    b = Broker(tmp_path_factory.mktemp("broker") / "broker.log")
    yield b
    b.stop()


#: The --max-wait of the ``short_wait_broker``: waits longer than this are
#: chains of Acquire calls.
SHORT_MAX_WAIT = 2.0


@pytest.fixture(scope="session")
def short_wait_broker(tmp_path_factory):
    """A broker whose --max-wait is SHORT_MAX_WAIT, for the long-wait tests."""
    b = Broker(tmp_path_factory.mktemp("short-wait") / "broker.log", args=["--max-wait", f"{SHORT_MAX_WAIT:g}s"])
    yield b
    b.stop()


@pytest.fixture
def own_broker(tmp_path):
    """A broker for one test only (for tests that kill it)."""
    b = Broker(tmp_path / "broker.log")
    yield b
    b.stop()


@pytest.fixture
def client(broker):
    with Client(broker.address) as c:
        yield c


@pytest.fixture
def other(broker):
    """A second, independent client (another process, as far as the broker
    knows)."""
    with Client(broker.address) as c:
        yield c


def eventually(condition, timeout: float = 10.0, what: str = "condition"):
    """Waits (polling every 10 ms) until ``condition()`` is true: for states
    only visible by asking the broker (e.g. how many callers wait)."""
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, f"{what}: not within {timeout} s"
        time.sleep(0.01)


async def eventually_async(condition, timeout: float = 10.0, what: str = "condition"):
    """``eventually`` for a coroutine function ``condition``."""
    end = time.monotonic() + timeout
    while not await condition():
        assert time.monotonic() < end, f"{what}: not within {timeout} s"
        await asyncio.sleep(0.01)


@pytest.fixture
def name(request):
    """A lock name unique to the test."""
    return f"py-tests/{request.node.name}/{time.monotonic_ns()}"
