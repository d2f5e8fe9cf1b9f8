#!/usr/bin/env python3
"""Redis CPU per call of the broker's Lua scripts, without the broker.

Drives the repository's scripts (server/src/store/lua/, each joined with the
parts its header's "Uses:" line names, as scripts.rs joins them) straight
into a redis-server over one pipelined connection (64 calls in flight, like
the broker's multiplexed connection), and reads the server's CPU time from
/proc/<pid>/stat around each phase. Prints Redis CPU per:
  - acquire+release cycle of the broker's scripts (uncontended, 64 names),
  - cycle of a plain lock (bench/lua/plain_*.lua),
  - cycle of two scripts that only return, given the broker's arguments
    (what a script costs before it does anything),
  - lease renewed by renew_many.lua (10,000 leases, batches of 250).

Usage: bench/scripts/lua-cost.py PORT [CYCLES]   (a local, empty, throwaway
redis-server: it is flushed). Three runs each; min / median / max.
"""
import os, re, socket, statistics, sys, time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
LUA = os.path.join(ROOT, "server", "src", "store", "lua")

CONTRACT = os.path.join(ROOT, "server", "src", "store", "contract.rs")

def constants():
    """The contract's constants, `NAME = value;` inside `contract! { }` of
    server/src/store/contract.rs, as the broker fills them in
    (`__CONSTANTS__` becomes a `local NAME = value` line each; `__NAME__`
    the value)."""
    text = open(CONTRACT).read()
    block = text[text.index("contract! {"):]
    block = block[:block.index("\n}\n")]
    return {n: int(v.replace("_", "")) for n, v in
            re.findall(r"^\s*([A-Z][A-Z0-9_]*) = (-?[\d_]+);", block, re.M)}

def fill(text):
    c = constants()
    text = text.replace("__CONSTANTS__", "".join(f"local {n} = {v}\n" for n, v in c.items()))
    return re.sub(r"__([A-Z][A-Z0-9_]*)__", lambda m: str(c[m.group(1)]), text)

def script(name):
    body = open(os.path.join(LUA, name)).read()
    uses = re.search(r"^-- Uses: (.*)$", body, re.M)
    parts = [p for p in re.findall(r"[\w]+\.lua", uses.group(1))] if uses else []
    return fill("".join(open(os.path.join(LUA, p)).read() for p in parts) + body)

def enc(*a):
    out = [b"*%d\r\n" % len(a)]
    for x in a:
        x = x if isinstance(x, bytes) else str(x).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(x), x))
    return b"".join(out)

class Redis:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.f = self.s.makefile("rb")
        info = self.pipe([("INFO", "server")])[0].decode()
        self.pid = int(re.search(r"process_id:(\d+)", info).group(1))
    def read(self):
        line = self.f.readline(); t = line[:1]
        if t == b"*":
            n = int(line[1:]); return [self.read() for _ in range(n)] if n >= 0 else None
        if t == b"$":
            n = int(line[1:])
            return None if n < 0 else self.f.read(n + 2)[:-2]
        if t == b"-":
            raise RuntimeError(line.decode().strip())
        return line[1:].strip()
    def pipe(self, cmds):
        self.s.sendall(b"".join(enc(*c) for c in cmds)); return [self.read() for _ in cmds]
    def load(self, src):
        return self.pipe([("SCRIPT", "LOAD", src)])[0].decode()
    def cpu(self):
        st = open(f"/proc/{self.pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(st[11]) + int(st[12])) / os.sysconf("SC_CLK_TCK")

def keys(name):
    k = "{b:}{" + name + "}"
    return k, k + ":line", k + ":until", k + ":permits"

def cycles(r, acquire, release, n, width=64):
    names = [f"bench/{i}" for i in range(width)]
    c0 = r.cpu(); done = 0
    while done < n:
        toks = [os.urandom(16).hex() for _ in names]
        for reply in r.pipe([acquire(nm, t) for nm, t in zip(names, toks)]):
            if isinstance(reply, list) and reply[0] not in (b"1",):
                raise RuntimeError(f"not granted: {reply}")
        r.pipe([release(nm, t) for nm, t in zip(names, toks)])
        done += width
    return 1e6 * (r.cpu() - c0) / done

def main():
    port = int(sys.argv[1]); n = int(sys.argv[2]) if len(sys.argv) > 2 else 100_000
    r = Redis(port); r.pipe([("FLUSHALL",)])
    acq, rel = r.load(script("acquire.lua")), r.load(script("release.lua"))
    nop = r.load("return {1, 1, 1, '', 1, 0}")
    pa = r.load(open(os.path.join(ROOT, "bench", "lua", "plain_acquire.lua")).read())
    pr = r.load(open(os.path.join(ROOT, "bench", "lua", "plain_release.lua")).read())
    ren = r.load(script("renew_many.lua"))
    def broker_acq(name, tok, sha=acq):
        k, line, until, permits = keys(name)
        return ("EVALSHA", sha, 5, k, line, until, permits, "{b:}fences", tok, 10000, "", 0, 0, k + ":granted", 0, 3000)
    def broker_rel(name, tok, sha=rel):
        k, line, until, permits = keys(name)
        return ("EVALSHA", sha, 4, k, permits, line, until, tok, k + ":released")
    phases = {
        "broker scripts, acquire+release cycle": lambda: cycles(r, broker_acq, broker_rel, n),
        "plain lock, acquire+release cycle": lambda: cycles(
            r, lambda nm, t: ("EVALSHA", pa, 2, "pl:" + nm, "pl:" + nm + ":f", t, 10000),
            lambda nm, t: ("EVALSHA", pr, 1, "pl:" + nm, t), n),
        "two scripts that only return (broker's arguments)": lambda: cycles(
            r, lambda nm, t: broker_acq(nm, t, nop), lambda nm, t: broker_rel(nm, t, nop), n),
    }
    results = {k: [] for k in phases}; results["renew_many.lua, per renewed lease"] = []
    leases = [(f"renew/{i}", os.urandom(16).hex()) for i in range(10_000)]
    for i in range(0, len(leases), 500):
        r.pipe([broker_acq(nm, t)[:9] + (60000,) + broker_acq(nm, t)[10:] for nm, t in leases[i:i + 500]])
    for _ in range(3):
        for name, run in phases.items():
            results[name].append(run())
        c0 = r.cpu()
        for _ in range(10):
            cmds = []
            for i in range(0, len(leases), 250):
                ks, args = [], []
                for nm, t in leases[i:i + 250]:
                    k, _, _, permits = keys(nm); ks += [k, permits]; args += [t, 0]
                cmds.append(("EVALSHA", ren, len(ks), *ks, *args))
            for reply in r.pipe(cmds):
                # One string "code ttl fence,..." (or, from builds before
                # 2026-12-01, an array of {code, ttl, fence}).
                codes = ([item.split(b" ")[0] for item in reply.split(b",")]
                         if isinstance(reply, bytes) else [item[0] for item in reply])
                if any(code != b"1" for code in codes):
                    raise RuntimeError("a renewal failed")
        results["renew_many.lua, per renewed lease"].append(1e6 * (r.cpu() - c0) / (10 * len(leases)))
    print("Redis CPU, µs (min / median / max of 3 runs):")
    for name, vs in results.items():
        vs.sort(); print(f"  {name:52s} {vs[0]:6.1f} / {statistics.median(vs):6.1f} / {vs[-1]:6.1f}")

if __name__ == "__main__":
    main()
