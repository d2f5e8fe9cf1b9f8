"""Fixtures: a real broker process (memory store) on a free loopback port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Sequence

import pytest

from leasehold import Client

REPO = Path(__file__).resolve().parents[3]
DEFAULT_BIN = REPO / "target" / "debug" / "leasehold"


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
    """A `leasehold serve --store memory` process; ``args`` are more serve
    flags (TLS files, an auth file)."""

    def __init__(self, log_path: Path, args: Sequence[str] = ()):
        binary = broker_binary()
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            [binary, "serve", "--store", "memory", "--listen", self.address, "--metrics-listen", "127.0.0.1:0", *args],
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

    def kill(self) -> None:
        """SIGKILL: no clean shutdown, streams just break."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self._log.close()


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    b = Broker(tmp_path_factory.mktemp("broker") / "broker.log")
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


@pytest.fixture
def name(request):
    """A lock name unique to the test."""
    return f"py-tests/{request.node.name}/{time.monotonic_ns()}"
