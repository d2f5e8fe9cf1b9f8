"""The SQL fence guard (leasehold.fence) against a real PostgreSQL server
started for this module, and the story it exists for: a holder frozen past
its TTL (SIGSTOP, as a GC pause) wakes up and writes with its old fence,
after the lock's next holder wrote; the database refuses the late write."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from leasehold import Client, fence
from leasehold.fence import NoSuchRow, StaleFence

from conftest import eventually
from stores import Postgres, need


@pytest.fixture(scope="module")
def pg():
    need("psycopg")
    server = Postgres()
    yield server
    server.stop()


@pytest.fixture
def conn(pg):
    with pg.connect() as c:
        yield c


@pytest.fixture
def table(conn, request):
    """A table of the test's own: (id, value), no fence column yet."""
    name = f"t_{request.node.name[:40]}"
    conn.execute(f"DROP TABLE IF EXISTS {fence.quote_ident(name)}")
    conn.execute(f"CREATE TABLE {fence.quote_ident(name)} (id int PRIMARY KEY, value text)")
    conn.execute(fence.migration(name))
    return name


def row(conn, table, id=1):
    return conn.execute(f"SELECT value, fence FROM {fence.quote_ident(table)} WHERE id = %s", [id]).fetchone()


def test_the_migration_adds_a_fence_column_that_every_grant_passes(conn):
    conn.execute('DROP TABLE IF EXISTS "accounts"')
    conn.execute('CREATE TABLE "accounts" (id int PRIMARY KEY, balance int)')
    conn.execute("INSERT INTO accounts VALUES (1, 10)")
    assert fence.migration("accounts") == (
        'ALTER TABLE "accounts" ADD COLUMN IF NOT EXISTS "fence" bigint NOT NULL DEFAULT 0;'
    )
    conn.execute(fence.migration("accounts"))
    conn.execute(fence.migration("accounts"))  # again: nothing to do
    assert conn.execute("SELECT balance, fence FROM accounts").fetchone() == (10, 0)
    assert fence.guarded_update(conn, "accounts", {"id": 1}, {"balance": 20}, 1) == 1


def test_equal_fences_pass_and_a_lower_one_is_refused(conn, table):
    fence.guarded_upsert(conn, table, {"id": 1}, {"value": "first"}, 5)
    assert row(conn, table) == ("first", 5)
    # The same holder writes again under its lease: the same fence passes.
    assert fence.guarded_update(conn, table, {"id": 1}, {"value": "again"}, 5) == 1
    with conn.cursor() as cursor:  # a cursor does as well as a connection
        assert fence.guarded_update(cursor, table, {"id": 1}, {"value": "successor"}, 7) == 1
    with pytest.raises(StaleFence) as refused:
        fence.guarded_update(conn, table, {"id": 1}, {"value": "late"}, 6)
    assert (refused.value.fence, refused.value.stored) == (6, 7)
    assert "fence 7" in str(refused.value) and "fence 6" in str(refused.value)
    assert row(conn, table) == ("successor", 7)


def test_an_update_of_a_missing_row_is_not_taken_for_a_stale_one(conn, table):
    with pytest.raises(NoSuchRow):
        fence.guarded_update(conn, table, {"id": 2}, {"value": "x"}, 5)
    assert row(conn, table, 2) is None


def test_an_upsert_creates_the_row_then_refuses_a_lower_fence(conn, table):
    fence.guarded_upsert(conn, table, {"id": 3}, {"value": "created"}, 4)
    assert row(conn, table, 3) == ("created", 4)
    fence.guarded_upsert(conn, table, {"id": 3}, {"value": "updated"}, 4)
    with pytest.raises(StaleFence) as refused:
        fence.guarded_upsert(conn, table, {"id": 3}, {"value": "late"}, 3)
    assert refused.value.stored == 4
    assert row(conn, table, 3) == ("updated", 4)


def test_odd_identifiers_are_quoted_and_values_bound(conn):
    schema, table = 'my schema', 'odd "table" 50%s'
    column, fence_column = "the value; DROP TABLE x", "Fence %"
    q = fence.quote_ident
    assert q('odd "table" 50%s') == '"odd ""table"" 50%s"'
    conn.execute(f"CREATE SCHEMA IF NOT EXISTS {q(schema)}")
    conn.execute(f"DROP TABLE IF EXISTS {q(schema)}.{q(table)}")
    conn.execute(f"CREATE TABLE {q(schema)}.{q(table)} (id text PRIMARY KEY, {q(column)} text)")
    conn.execute(fence.migration((schema, table), fence_column))
    value = "it's 100% '); DROP TABLE accounts; --"
    fence.guarded_upsert(conn, (schema, table), {"id": "a'b"}, {column: value}, 9, fence_column=fence_column)
    fence.guarded_update(conn, (schema, table), {"id": "a'b"}, {column: value + "!"}, 9, fence_column=fence_column)
    with pytest.raises(StaleFence):
        fence.guarded_update(conn, (schema, table), {"id": "a'b"}, {column: "late"}, 8, fence_column=fence_column)
    got = conn.execute(f"SELECT {q(column)}, {q(fence_column)} FROM {q(schema)}.{q(table)}").fetchall()
    assert got == [(value + "!", 9)]


def test_a_write_decided_while_a_higher_fence_is_being_written_is_refused(pg, conn, table):
    fence.guarded_upsert(conn, table, {"id": 1}, {"value": "old"}, 1)
    with pg.connect(autocommit=False) as successor:
        # The successor's write holds the row (not committed yet)...
        fence.guarded_update(successor, table, {"id": 1}, {"value": "successor"}, 9)
        outcome = []

        def late() -> None:
            with pg.connect() as c:
                try:
                    fence.guarded_update(c, table, {"id": 1}, {"value": "late"}, 8)
                    outcome.append("written")
                except StaleFence as e:
                    outcome.append(e)

        t = threading.Thread(target=late)
        t.start()
        # ...so the late write, which read fence 1 in its snapshot, waits
        # for it (a lock wait visible in pg_stat_activity)...
        eventually(
            lambda: conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            ).fetchone()[0] == 1,
            what="the late write waits for the row",
        )
        successor.commit()
    t.join(10)
    # ...and then re-checks the row as committed: refused, and it cannot
    # say what fence the row held when it looked.
    (refused,) = outcome
    assert isinstance(refused, StaleFence) and refused.fence == 8 and refused.stored is None
    assert row(conn, table) == ("successor", 9)


def read_line(process, timeout=60.0):
    """The next line ``process`` prints, failing (not hanging) if it
    prints none within ``timeout`` seconds: a holder that hangs fails the
    test."""
    lines = queue.Queue()
    threading.Thread(target=lambda: lines.put(process.stdout.readline()), daemon=True).start()
    try:
        return lines.get(timeout=timeout)
    except queue.Empty:
        raise AssertionError(f"holder A printed nothing for {timeout} s") from None


def test_a_holder_paused_past_its_ttl_has_its_late_write_refused(broker, pg, conn, table, name):
    holder = subprocess.Popen(
        [sys.executable, str(Path(__file__).parent / "fence_holder.py"), broker.address, pg.conninfo, name, table],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = read_line(holder)
        assert line.startswith("wrote "), f"holder A: {line!r}"
        f1 = int(line.split()[1])
        assert row(conn, table) == ("A", f1)
        # A freezes (a stop-the-world pause): no heartbeat, its lease lapses.
        os.kill(holder.pid, signal.SIGSTOP)
        with Client(broker.address) as b:
            # Granted once A's 1 s lease expired.
            lease = b.acquire(name, ttl=10, wait=15)
            assert lease.fence > f1
            fence.guarded_update(conn, table, {"id": 1}, {"value": "B"}, lease.fence)
            # A wakes up and makes the write it was about to make.
            os.kill(holder.pid, signal.SIGCONT)
            holder.stdin.write("go\n")
            holder.stdin.flush()
            assert read_line(holder).split() == ["stale", str(lease.fence)]
            assert row(conn, table) == ("B", lease.fence)
        assert holder.wait(15) == 0
    finally:
        if holder.poll() is None:
            os.kill(holder.pid, signal.SIGCONT)
            holder.kill()
            holder.wait()
