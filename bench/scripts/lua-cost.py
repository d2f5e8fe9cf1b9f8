#!/usr/bin/env python3
"""Redis CPU per call of the broker's Lua scripts, without the broker.

Drives the repository's scripts (server/src/store/lua/, each joined with the
parts its header's "Uses:" line names, as scripts.rs joins them) straight
into a redis-server over one pipelined connection (64 calls in flight, like
the broker's multiplexed connection), and reads the server's CPU time from
/proc/<pid>/stat around each phase. Prints Redis CPU per:
  - acquire+release cycle of the broker's scripts (uncontended, 64 names),
  - cycle of a plain lock (bench/lua/plain_*.lua),
  - cycle of a reentrant fenced lock made of the calls Redisson's
    RFencedLock makes (bench/lua/fenced_hash_*.lua),
  - cycle of two scripts that only return, given the broker's arguments
    (what a script costs before it does anything),
  - the same scripts loaded as one function library and called by FCALL,
    as the broker runs them where Redis has functions,
  - lease renewed by renew_many.lua (10,000 leases, batches of 250).
With --ablate, also per cycle of the broker's scripts with one step taken
out at a time (the grant's PUBLISH, the release's end record, ...): what
each step of the uncontended cycle costs Redis, by difference. The
ablated scripts are for measuring only (each breaks a part of the
contract); a step whose text is no longer in the scripts fails the run.

With --callgrind FILE, Redis runs under valgrind's callgrind, started with
--callgrind-out-file=FILE (FILE as it names the output, its %p filled in),
and the script reports Redis's instructions per cycle instead of its CPU
time: a count that is the same from run to run whatever else the machine
is doing, for comparisons on a noisy machine (instructions are not time:
a cache miss costs more than an instruction).

Usage: bench/scripts/lua-cost.py PORT [CYCLES] [--ablate] [--callgrind FILE]
(a local, empty, throwaway redis-server: it is flushed). Three runs each,
the phases interleaved; min / median / max.
"""
import glob, os, re, socket, statistics, subprocess, sys, time

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

def fill(text, fmt=2):
    c = constants()
    text = text.replace("__RECORD_FORMAT__", str(fmt))
    text = text.replace("__CONSTANTS__", "".join(f"local {n} = {v}\n" for n, v in c.items()))
    return re.sub(r"__([A-Z][A-Z0-9_]*)__", lambda m: str(c[m.group(1)]), text)

def script(name, batched=False, fmt=2):
    body = open(os.path.join(LUA, name)).read()
    uses = re.search(r"^-- Uses: (.*)$", body, re.M)
    parts = [p for p in re.findall(r"[\w]+\.lua", uses.group(1))] if uses else []
    if batched:
        body = BATCH.replace("__BODY__", body)
    return fill("".join(open(os.path.join(LUA, p)).read() for p in parts) + body, fmt)

# The scripts as one function library, as the broker loads it where Redis
# has functions (server/src/store/redis/scripts.rs, Library): every part
# once, at the top, then each script's body as a function of KEYS and ARGV.
PARTS = ["constants.lua", "record.lua", "line.lua", "queue.lua", "fence.lua", "renew_lease.lua"]

def library(names, fmt=2):
    text = f"#!lua name=lua_cost_{fmt}\n" + "".join(open(os.path.join(LUA, p)).read() for p in PARTS)
    for name in names:
        body = open(os.path.join(LUA, name)).read()
        text += (f"redis.register_function('lua_cost_{fmt}_{name[:-4]}', function(KEYS, ARGV)\n"
                 f"{body}\nend)\n")
    return fill(text, fmt)

# A script that runs another's body once per call batched into it (what
# coalescing concurrent calls into one script run would save Redis; the
# body still reads the clock and the counter once per call). ARGV[1] and
# ARGV[2]: the keys and arguments of one call; then each call's keys and
# arguments in turn.
BATCH = """local function one(KEYS, ARGV)
__BODY__
end
local out, nk, na = {}, tonumber(ARGV[1]), tonumber(ARGV[2])
for i = 0, #KEYS / nk - 1 do
  local k, a = {}, {}
  for j = 1, nk do k[j] = KEYS[i * nk + j] end
  for j = 1, na do a[j] = ARGV[2 + i * na + j] end
  out[i + 1] = one(k, a)
end
return out
"""

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
    # What a phase cost Redis: CPU µs, or (under callgrind) instructions.
    callgrind = None
    def begin(self):
        if self.callgrind:
            subprocess.run(["callgrind_control", "-z", str(self.pid)], check=True, capture_output=True)
        else:
            self.c0 = self.cpu()
    def end(self):
        if not self.callgrind:
            return 1e6 * (self.cpu() - self.c0)
        subprocess.run(["callgrind_control", "-d", str(self.pid)], check=True, capture_output=True)
        dumps = glob.glob(glob.escape(self.callgrind) + ".*")
        newest = max(dumps, key=lambda f: int(f.rsplit(".", 1)[1]))
        return int(re.search(r"^summary: (\d+)$", open(newest).read(), re.M).group(1))

def keys(name):
    k = "{b:}{" + name + "}"
    return k, k + ":line", k + ":until", k + ":permits"

def cycles(r, acquire, release, n, width=64):
    names = [f"bench/{i}" for i in range(width)]
    r.begin(); done = 0
    while done < n:
        toks = [os.urandom(16).hex() for _ in names]
        for reply in r.pipe([acquire(nm, t) for nm, t in zip(names, toks)]):
            if isinstance(reply, list) and reply[0] not in (b"1", b"-1"):
                raise RuntimeError(f"not granted: {reply}")
        r.pipe([release(nm, t) for nm, t in zip(names, toks)])
        done += width
    return r.end() / done

def batched_cycles(r, acquire, release, n, width=64):
    """As cycles(), each side's 64 calls in one script run."""
    names = [f"bench/{i}" for i in range(width)]
    r.begin(); done = 0
    while done < n:
        toks = [os.urandom(16).hex() for _ in names]
        (replies,) = r.pipe([acquire(names, toks)])
        if any(reply[0] != b"1" for reply in replies):
            raise RuntimeError("not granted in a batch")
        r.pipe([release(names, toks)])
        done += width
    return r.end() / done

# One step of the uncontended cycle taken out: (script, text, replacement)
# substitutions, each of which must be found.
ABLATIONS = {
    "the grant's PUBLISH": [("acquire.lua", "redis.call('PUBLISH', ARGV[6], '')", "")],
    "the release's PUBLISH": [("release.lua",
        "redis.call('PUBLISH', ARGV[2], next and string.sub(next, 1, 16) or '')", "")],
    "the release's end record (SET ... PX)": [("release.lua",
        "  redis.call('DEL', key)\n  record_end(key, token, 'x', LINGER_MS)\n",
        "  redis.call('DEL', key)\n")],
    "the grant's TIME": [("acquire.lua", "  local time = redis.call('TIME')\n  local now_us",
                          "  local time = {'1764900000', '0'}\n  local now_us")],
    "the fence (SET ... GET on the counter)": [("acquire.lua",
        "next_fence(counter, last, now_us, tonumber(ARGV[4]))", "1, '1'")],
    "the line and permits looks (EXISTS, both)": [
        ("acquire.lua", "if redis.call('EXISTS', line, other or line) == 0 then", "if true then"),
        ("release.lua", "if redis.call('EXISTS', queue) == 1 then", "if false then")],
    "the release's PTTL (format 2's time left)": [("release.lua",
        "local left = redis.call('PTTL', key) - tonumber(d) - LINGER_MS", "local left = 1")],
    "the release's record parse (string.match)": [("release.lua",
        "local o, n, d, f, t, g, h = string.match(v, '^L([^|]*)|([01])(%d+)|(%d+)|(%d+)|(%d+)|(.*)$')",
        "local o, n, d, f, t, g, h = string.sub(v, 2, 33), '0', '0', '1', '1', '1', ''")],
}

def ablated(name, cuts):
    text = script(name)
    for file, old, new in cuts:
        if file == name:
            if old not in text:
                raise SystemExit(f"--ablate: {file} no longer has {old!r}: update ABLATIONS")
            text = text.replace(old, new, 1)
    return text

def main():
    args = sys.argv[1:]
    callgrind = None
    if "--callgrind" in args:
        i = args.index("--callgrind"); callgrind = args[i + 1]; del args[i:i + 2]
    args = [a for a in args if a != "--ablate"]
    port = int(args[0]); n = int(args[1]) if len(args) > 1 else 100_000
    r = Redis(port); r.pipe([("FLUSHALL",)])
    if callgrind:
        r.callgrind = callgrind.replace("%p", str(r.pid))
    acq, rel = r.load(script("acquire.lua")), r.load(script("release.lua"))
    acq1, rel1 = r.load(script("acquire.lua", fmt=1)), r.load(script("release.lua", fmt=1))
    r.pipe([("FUNCTION", "FLUSH")])
    for fmt in (1, 2):
        r.pipe([("FUNCTION", "LOAD", "REPLACE",
                 library(["acquire.lua", "release.lua", "renew_many.lua"], fmt))])
    nop = r.load("return {1, 1, 1, '', 1, 0}")
    pa = r.load(open(os.path.join(ROOT, "bench", "lua", "plain_acquire.lua")).read())
    pr = r.load(open(os.path.join(ROOT, "bench", "lua", "plain_release.lua")).read())
    fa = r.load(open(os.path.join(ROOT, "bench", "lua", "fenced_hash_acquire.lua")).read())
    fr = r.load(open(os.path.join(ROOT, "bench", "lua", "fenced_hash_release.lua")).read())
    def fcall(fmt, name):
        return ("FCALL", f"lua_cost_{fmt}_{name}")
    # sha: a script's SHA-1 (EVALSHA), or ("FCALL", function).
    def call(sha):
        return sha if isinstance(sha, tuple) else ("EVALSHA", sha)
    def broker_acq(name, tok, sha=acq):
        k, line, until, permits = keys(name)
        return (*call(sha), 5, k, line, until, permits, "{b:}fences", tok, 10000, "", 0, 0, k + ":granted", 0, 3000)
    def broker_rel(name, tok, sha=rel):
        k, line, until, permits = keys(name)
        return (*call(sha), 4, k, permits, line, until, tok, k + ":released")
    phases = {
        "broker functions (FCALL), acquire+release cycle": lambda: cycles(
            r, lambda nm, t: broker_acq(nm, t, fcall(2, "acquire")),
            lambda nm, t: broker_rel(nm, t, fcall(2, "release")), n),
        "broker scripts, acquire+release cycle": lambda: cycles(r, broker_acq, broker_rel, n),
        "broker scripts, record format 1, cycle": lambda: cycles(
            r, lambda nm, t: broker_acq(nm, t, acq1), lambda nm, t: broker_rel(nm, t, rel1), n),
        "plain lock, acquire+release cycle": lambda: cycles(
            r, lambda nm, t: ("EVALSHA", pa, 2, "pl:" + nm, "pl:" + nm + ":f", t, 10000),
            lambda nm, t: ("EVALSHA", pr, 1, "pl:" + nm, t), n),
        "RFencedLock's calls (fenced_hash_*.lua), cycle": lambda: cycles(
            r, lambda nm, t: ("EVALSHA", fa, 2, "{rf:" + nm + "}", "{rf:" + nm + "}:token", 10000, t),
            lambda nm, t: ("EVALSHA", fr, 3, "{rf:" + nm + "}", "{rf:" + nm + "}:released",
                           "{rf:" + nm + "}:unlock:" + t, 0, 10000, t, 10000), n),
        "two scripts that only return (broker's arguments)": lambda: cycles(
            r, lambda nm, t: broker_acq(nm, t, nop), lambda nm, t: broker_rel(nm, t, nop), n),
    }
    acq64, rel64 = r.load(script("acquire.lua", True)), r.load(script("release.lua", True))
    def batch(sha, calls):
        ks, args = [], []
        for c in calls:
            nk = c[2]; ks += c[3:3 + nk]; args += c[3 + nk:]
        return ("EVALSHA", sha, len(ks), *ks, calls[0][2], len(calls[0]) - 3 - calls[0][2], *args)
    phases["broker scripts, 64 calls batched in one run each way, cycle"] = lambda: batched_cycles(
        r, lambda nms, ts: batch(acq64, [broker_acq(nm, t) for nm, t in zip(nms, ts)]),
        lambda nms, ts: batch(rel64, [broker_rel(nm, t) for nm, t in zip(nms, ts)]), n)
    if "--ablate" in sys.argv:
        for step, cuts in ABLATIONS.items():
            a = r.load(ablated("acquire.lua", cuts)); b = r.load(ablated("release.lua", cuts))
            phases[f"cycle without {step}"] = (lambda a, b: lambda: cycles(
                r, lambda nm, t: broker_acq(nm, t, a), lambda nm, t: broker_rel(nm, t, b), n))(a, b)
    # Renewals: 10,000 leases per record format, granted and renewed by
    # the scripts of that format.
    renewals = {}
    for fmt, grant in ((2, acq), (1, acq1)):
        label = "renew_many.lua, per renewed lease" + ("" if fmt == 2 else ", record format 1")
        leases = [(f"renew{fmt}/{i}", os.urandom(16).hex()) for i in range(10_000)]
        for i in range(0, len(leases), 500):
            r.pipe([broker_acq(nm, t, grant)[:9] + (600000,) + broker_acq(nm, t, grant)[10:]
                    for nm, t in leases[i:i + 500]])
        renewals[label] = (r.load(script("renew_many.lua", fmt=fmt)), leases)
        renewals[label.replace("renew_many.lua", "renew_many function (FCALL)")] = (
            fcall(fmt, "renew_many"), leases)
    def renew_all(ren, leases):
        rounds = 1 if callgrind else 10
        r.begin()
        for _ in range(rounds):
            cmds = []
            for i in range(0, len(leases), 250):
                ks, args = [], []
                for nm, t in leases[i:i + 250]:
                    k, _, _, permits = keys(nm); ks += [k, permits]; args += [t, 0]
                cmds.append((*call(ren), len(ks), *ks, *args))
            for reply in r.pipe(cmds):
                # One string "code ttl fence,..." (or, from builds before
                # 2026-12-01, an array of {code, ttl, fence}).
                codes = ([item.split(b" ")[0] for item in reply.split(b",")]
                         if isinstance(reply, bytes) else [item[0] for item in reply])
                if any(code != b"1" for code in codes):
                    raise RuntimeError("a renewal failed")
        return r.end() / (rounds * len(leases))
    for label, (ren, leases) in renewals.items():
        phases[label] = (lambda ren, leases: lambda: renew_all(ren, leases))(ren, leases)
    results = {k: [] for k in phases}
    for _ in range(3):
        for name, run in phases.items():
            results[name].append(run())
    if callgrind:
        print("Redis instructions, thousands (min / median / max of 3 runs):")
        scale = 1e-3
    else:
        print("Redis CPU, µs (min / median / max of 3 runs):")
        scale = 1
    for name, vs in results.items():
        vs = sorted(v * scale for v in vs)
        print(f"  {name:56s} {vs[0]:6.1f} / {statistics.median(vs):6.1f} / {vs[-1]:6.1f}")

if __name__ == "__main__":
    main()
