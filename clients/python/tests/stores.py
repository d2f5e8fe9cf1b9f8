"""The real stores the fence guards are tested against: a PostgreSQL server
and moto's S3 server, each started by the test run on a free loopback port
in a temporary directory, and stopped after it.

Their Python dependencies (psycopg, moto, boto3) are installed by
run-tests.sh in its "newest" virtualenv only, which sets
LEASEHOLD_PY_FENCE_TESTS=1: there a missing one fails the tests; elsewhere
they are skipped."""

from __future__ import annotations

import glob
import importlib
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import ModuleType
from typing import List, Optional

import pytest

from conftest import free_port


def need(module: str) -> ModuleType:
    """Imports a fence test dependency: a failure where run-tests.sh
    installed them (LEASEHOLD_PY_FENCE_TESTS=1), else a skip."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        if os.environ.get("LEASEHOLD_PY_FENCE_TESTS") == "1":
            pytest.fail(f"{module} is missing from this virtualenv ({e}): run-tests.sh installs it")
        pytest.skip(f"{module} is not installed (run-tests.sh installs it in its newest virtualenv)")


def postgres_bin() -> Optional[Path]:
    """$LEASEHOLD_PG_BIN, else the newest /usr/lib/postgresql/*/bin."""
    given = os.environ.get("LEASEHOLD_PG_BIN")
    if given:
        return Path(given)
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    return Path(found[-1]).parent if found else None


class Postgres:
    """A PostgreSQL server of its own: initdb in a temp dir, trust
    authentication, on 127.0.0.1 at a free port, fsync off (a test's data
    need not survive a crash). PostgreSQL refuses to run as root: as root,
    the directory belongs to the ``postgres`` user and the server runs as
    it (runuser)."""

    def __init__(self):
        bindir = postgres_bin()
        if bindir is None or not (bindir / "initdb").exists():
            pytest.fail("PostgreSQL's initdb was not found: install Debian's postgresql (run-tests.sh does) or set LEASEHOLD_PG_BIN")
        self._bin = bindir
        self.port = free_port()
        # Not under pytest's tmp_path: that is private to root, and the
        # server may run as postgres.
        self.dir = Path(tempfile.mkdtemp(prefix="leasehold-pg-"))
        self._as: List[str] = []
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.dir, user.pw_uid, user.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]
        self.data = self.dir / "data"
        self.log = self.dir / "server.log"
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        # -w: pg_ctl returns once the server accepts connections.
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "-t", "30", "start")
        self.conninfo = f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"

    def _run(self, tool: str, *args: str) -> None:
        r = subprocess.run([*self._as, str(self._bin / tool), *args], capture_output=True, text=True)
        if r.returncode != 0:
            log = self.log.read_text(errors="replace") if self.log.exists() else ""
            pytest.fail(f"{tool} failed ({r.returncode}): {r.stdout}{r.stderr}{log}")

    def connect(self, autocommit: bool = True):
        psycopg = need("psycopg")
        return psycopg.connect(self.conninfo, autocommit=autocommit)

    def stop(self) -> None:
        subprocess.run(
            [*self._as, str(self._bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"],
            capture_output=True,
        )
        shutil.rmtree(self.dir, ignore_errors=True)


class MotoS3:
    """moto's server (``moto_server``, from moto[server] in this
    virtualenv) on 127.0.0.1 at a free port, and a boto3 S3 client for it
    with dummy credentials."""

    def __init__(self, log_path: Path):
        need("moto")
        boto3 = need("boto3")
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        binary = Path(sys.executable).parent / "moto_server"
        command = [str(binary)] if binary.exists() else [sys.executable, "-m", "moto.server"]
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            [*command, "-H", "127.0.0.1", "-p", str(self.port)], stdout=self._log, stderr=subprocess.STDOUT
        )
        end = time.monotonic() + 30.0
        while True:
            if self.proc.poll() is not None:
                pytest.fail(f"moto_server exited with {self.proc.returncode}: {log_path.read_text(errors='replace')}")
            try:
                # Startup only: the server answers once it is ready.
                with urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=1):
                    break
            except (urllib.error.URLError, OSError):
                if time.monotonic() > end:
                    self.stop()
                    pytest.fail("moto_server did not answer within 30 s")
                time.sleep(0.05)
        self.client = boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()
