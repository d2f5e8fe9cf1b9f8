#!/usr/bin/env python3
"""The table of BENCHMARKS.md's side-by-side section, from the outputs of
bench/scripts/stores-side-by-side.sh: each figure as min / median / max
over the rounds (a killed holder's over every kill of every round).

Usage: bench/scripts/side-by-side-table.py [OUT]   (default target/side-by-side)
"""
import glob
import os
import re
import statistics
import sys

OUT = sys.argv[1] if len(sys.argv) > 1 else "target/side-by-side"
STORES = ["zookeeper", "redis", "postgres", "etcd"]
TITLES = {
    "zookeeper": "broker on ZooKeeper",
    "redis": "broker on Redis",
    "postgres": "broker on PostgreSQL",
    "etcd": "broker on etcd",
}


def runs(kind, store):
    return [
        open(path).read()
        for path in sorted(glob.glob(os.path.join(OUT, f"*-{kind}-{store}.txt")))
    ]


def mmm(values, fmt="{:,.0f}"):
    if not values:
        return "not read"
    values = sorted(values)
    return " / ".join(fmt.format(v) for v in (values[0], statistics.median(values), values[-1]))


def first(pattern, text):
    m = re.search(pattern, text, re.M)
    return m.groups() if m else None


def cycles_rows(store):
    texts = runs("cycles", store)
    rows = {}
    for workers in (1, 16, 64):
        per_s, p99, store_cpu, broker_cpu = [], [], [], []
        for t in texts:
            g = first(rf"^uncontended, {workers} workers\s+(\d+)\s+\d+\s+[\d.]+\s+\d+/(\d+)/\d+", t)
            if g:
                per_s.append(int(g[0]))
                p99.append(int(g[1]) / 1000)
            g = first(
                rf"^uncontended, {workers} workers\s+CPU µs per cycle: broker ([\d.]+) \+ \w+ ([\d.]+)",
                t,
            )
            if g:
                broker_cpu.append(float(g[0]))
                store_cpu.append(float(g[1]))
        rows[f"{workers} worker{'s' if workers > 1 else ''}, cycles/s"] = mmm(per_s)
        rows[f"{workers} worker{'s' if workers > 1 else ''}, acquire p99 (ms)"] = mmm(p99, "{:.1f}")
        rows[f"store CPU per cycle, {workers} workers (µs)"] = mmm(store_cpu)
        rows[f"broker CPU per cycle, {workers} workers (µs)"] = mmm(broker_cpu)
    handoffs, p50, p99, fair = [], [], [], []
    kills, expiry = [], []
    for t in texts:
        g = first(
            r"^one lock, 16 waiters\s+(\d+) handoffs/s .*handoff p50/p99 (\d+)/(\d+) µs; .*\(([\d.]+)\)$",
            t,
        )
        if g:
            handoffs.append(int(g[0]))
            p50.append(int(g[1]) / 1000)
            p99.append(int(g[2]) / 1000)
            fair.append(float(g[3]))
        g = first(
            r"^holder killed, broker\s+kill -9 -> next grant ([\d /]+) ms; expiry -> grant ([\d. /-]+) ms",
            t,
        )
        if g:
            kills += [int(v) for v in g[0].split(" / ")]
            expiry += [float(v) for v in g[1].split(" / ") if v.strip() != "-"]
    rows["one lock, 16 waiters: handoffs/s"] = mmm(handoffs)
    rows["the same: handoff p50 (ms)"] = mmm(p50, "{:.2f}")
    rows["the same: handoff p99 (ms)"] = mmm(p99, "{:.1f}")
    rows["the same: fairness (fewest / most grants)"] = mmm(fair, "{:.2f}")
    rows["holder killed (TTL 2 s): kill -9 -> the waiter's grant (ms)"] = mmm(kills)
    rows["the same: lease expiry -> grant (ms)"] = mmm(expiry, "{:.1f}")
    return rows


def heartbeat_rows(store):
    texts = runs("heartbeats", store)
    p50, p99, lost, store_cpu, broker_cpu, rss = [], [], [], [], [], []
    for t in texts:
        g = first(
            r"^\s+10000 broker\s+([\d.]+)/([\d.]+) ms\s+(\d+)\s+[\d.]+ -> [\d.]+\s+(\d+)%\s+(\d+)%\s+([\d.]+|-)",
            t,
        )
        if g:
            p50.append(float(g[0]))
            p99.append(float(g[1]))
            lost.append(int(g[2]))
            broker_cpu.append(int(g[3]))
            store_cpu.append(int(g[4]))
            if g[5] != "-":
                rss.append(float(g[5]))
    return {
        "10,000 leases over 100 streams: renewal p50 (ms)": mmm(p50, "{:.2f}"),
        "the same: renewal p99 (ms)": mmm(p99, "{:.2f}"),
        "the same: leases lost": mmm(lost),
        "the same: store CPU, % of a core": mmm(store_cpu),
        "the same: broker CPU, % of a core": mmm(broker_cpu),
        "the same: store RSS (MiB)": mmm(rss),
    }


table = {store: {**cycles_rows(store), **heartbeat_rows(store)} for store in STORES}
print("| | " + " | ".join(TITLES[s] for s in STORES) + " |")
print("|---|" + "---|" * len(STORES))
for row in table[STORES[0]]:
    print(f"| {row} | " + " | ".join(table[s].get(row, "") for s in STORES) + " |")
