"""Holder A of the GC-pause story (tests/test_fence_sql.py), a process of
its own so that the test can freeze it with SIGSTOP, as a long GC pause or
a swap-in would: it takes the lock, writes through the fence guard, checks
its lease, and then (frozen right there by the test, past its TTL) makes
its late write with the fence it was granted.

Usage: fence_holder.py BROKER CONNINFO LOCK TABLE. Prints ``wrote FENCE``
once its first write is in, reads a line from stdin (the test sends it
after SIGCONT), then prints ``stale STORED`` or ``written``."""

import sys

import psycopg

from leasehold import Client, fence

broker, conninfo, lock, table = sys.argv[1:5]
with Client(broker) as client, psycopg.connect(conninfo, autocommit=True) as conn:
    lease = client.acquire(lock, ttl=1)
    fence.guarded_upsert(conn, table, {"id": 1}, {"value": "A"}, lease.fence)
    lease.check()  # all is well: the lease is held...
    print(f"wrote {lease.fence}", flush=True)
    sys.stdin.readline()  # ...and here the process is frozen, past its TTL
    try:
        fence.guarded_update(conn, table, {"id": 1}, {"value": "A, late"}, lease.fence)
        print("written", flush=True)
    except fence.StaleFence as e:
        print(f"stale {e.stored}", flush=True)
