#!/usr/bin/env bash
# Curator's InterProcessMutex on a standalone ZooKeeper 3.8, measured as
# `leasehold-bench cycles` measures the broker (see CuratorBench.java):
# uncontended cycles at 1/16/64 workers, one lock with 16 waiters, a killed
# holder. Debian's packages only (no Maven): installs libcurator-*-java if
# missing, compiles CuratorBench.java with javac into a temporary folder,
# starts ZooKeeper on a free loopback port in another, runs the benchmark
# $RUNS times and prints min / median / max of each figure.
#
# Settings (environment):
#   RUNS=3  DURATION=5s  WORKERS=1,16,64  WAITERS=16  KILLS=3
#   SESSION=10s               session timeout of the cycles/handoffs client
#   FAILOVER_SESSIONS=2s,10s  the killed holder's session timeouts: 2 s as
#                             the bench's failover TTL, 10 s as the TTL of
#                             its cycles' leases
#   TICK_MS=2000              ZooKeeper's tickTime (its default); sessions
#                             expire on tick boundaries
#   MIN_SESSION_MS=2000       minSessionTimeout (default 2 x tickTime: a
#                             2 s session needs it lowered)
#   MAX_SESSION_MS=           maxSessionTimeout (default 20 x tickTime: set
#                             it when a small tickTime would cap a session)
#   SCENARIOS=all             or cycles, handoffs, failover
#   WAIT_LOAD=1.0             before each run, wait (up to 120 s) for a
#                             1-minute load average under it
#   KEEP=1                    keep the temporary folders (logs, run outputs)
set -euo pipefail

RUNS=${RUNS:-3}
DURATION=${DURATION:-5s}
WORKERS=${WORKERS:-1,16,64}
WAITERS=${WAITERS:-16}
KILLS=${KILLS:-3}
SESSION=${SESSION:-10s}
FAILOVER_SESSIONS=${FAILOVER_SESSIONS:-2s,10s}
TICK_MS=${TICK_MS:-2000}
MIN_SESSION_MS=${MIN_SESSION_MS:-2000}
WAIT_LOAD=${WAIT_LOAD:-1.0}
MAX_SESSION_MS=${MAX_SESSION_MS:-}
SCENARIOS=${SCENARIOS:-all}
JAVA=${JAVA:-java}
JAVAC=${JAVAC:-javac}
here=$(cd "$(dirname "$0")" && pwd)

# Debian's Curator and ZooKeeper, installed once.
packages=(libcurator-client-java libcurator-framework-java libcurator-recipes-java zookeeper)
missing=()
for p in "${packages[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
    if [ "$(id -u)" != 0 ]; then
        echo "run.sh: missing ${missing[*]}; install them as root (apt-get install ${missing[*]})" >&2
        exit 1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >&2
fi
command -v "$JAVAC" >/dev/null || { echo "run.sh: no javac (apt-get install openjdk-17-jdk-headless)" >&2; exit 1; }

J=/usr/share/java
work=$(mktemp -d -t curator-bench.XXXXXX)
zk_pid=
cleanup() {
    if [ -n "$zk_pid" ]; then kill "$zk_pid" 2>/dev/null || true; wait "$zk_pid" 2>/dev/null || true; fi
    if [ -z "${KEEP:-}" ]; then rm -rf "$work"; else echo "kept $work" >&2; fi
}
trap cleanup EXIT

# Compile: the jars' manifests name their own dependencies (guava,
# zookeeper, zookeeper-jute, slf4j-api, netty...).
mkdir -p "$work/classes"
"$JAVAC" -nowarn -d "$work/classes" -cp "$J/curator-recipes.jar:$J/curator-framework.jar:$J/curator-client.jar" \
    "$here/CuratorBench.java"
cp="$work/classes:$J/curator-recipes.jar:$J/slf4j-simple.jar"

# A free loopback port.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

mkdir -p "$work/zk/data"
cat >"$work/zk/zoo.cfg" <<EOF
tickTime=$TICK_MS
minSessionTimeout=$MIN_SESSION_MS
dataDir=$work/zk/data
clientPort=$port
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=srvr,ruok,mntr
EOF
if [ -n "$MAX_SESSION_MS" ]; then echo "maxSessionTimeout=$MAX_SESSION_MS" >>"$work/zk/zoo.cfg"; fi
# The log's times in UTC with ms: CuratorBench reads a killed holder's
# session expiry from it.
(cd "$work/zk" && exec "$JAVA" -Xmx256m -Duser.timezone=UTC \
    -Dorg.slf4j.simpleLogger.showDateTime=true \
    "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd HH:mm:ss.SSS" \
    -Dzookeeper.admin.enableServer=false -Djava.io.tmpdir="$work/zk" \
    -cp "$J/zookeeper.jar:$J/slf4j-simple.jar" \
    org.apache.zookeeper.server.quorum.QuorumPeerMain "$work/zk/zoo.cfg" >"$work/zk/zookeeper.log" 2>&1) &
zk_pid=$!

four_letter_word() { # word -> the server's answer, or nothing
    { exec 3<>"/dev/tcp/127.0.0.1/$port" && printf '%s' "$1" >&3 && timeout 2 cat <&3; exec 3>&-; } 2>/dev/null || true
}
for _ in $(seq 1 300); do
    if four_letter_word srvr | grep -q '^Mode: standalone'; then break; fi
    kill -0 "$zk_pid" 2>/dev/null || { echo "run.sh: ZooKeeper exited; its log:" >&2; cat "$work/zk/zookeeper.log" >&2; exit 1; }
    sleep 0.1
done
four_letter_word srvr | grep -q '^Mode: standalone' || { echo "run.sh: ZooKeeper did not serve within 30 s" >&2; exit 1; }
# The server's own JVM (the subshell exec'd into it).
echo "ZooKeeper on 127.0.0.1:$port (pid $zk_pid), tickTime=$TICK_MS, minSessionTimeout=$MIN_SESSION_MS${MAX_SESSION_MS:+, maxSessionTimeout=$MAX_SESSION_MS}, dataDir $work/zk/data"
four_letter_word srvr | head -1

started=$(date +%s)
outputs=()
for run in $(seq 1 "$RUNS"); do
    # A quieter machine first: up to 120 s for a 1-minute load average under $WAIT_LOAD.
    for _ in $(seq 1 120); do
        awk -v max="$WAIT_LOAD" '{ exit !($1 < max) }' /proc/loadavg && break
        sleep 1
    done
    echo "== run $run of $RUNS, $(date -u +%FT%TZ), load average $(cut -d' ' -f1-3 /proc/loadavg)"
    out="$work/run$run.txt"
    "$JAVA" -Xmx512m -Dorg.slf4j.simpleLogger.defaultLogLevel=warn \
        -Dorg.slf4j.simpleLogger.log.org.apache.zookeeper.ClientCnxn=error -cp "$cp" CuratorBench "$SCENARIOS" \
        --connect "127.0.0.1:$port" --workers "$WORKERS" --waiters "$WAITERS" --duration "$DURATION" \
        --kills "$KILLS" --session-timeout "$SESSION" --failover-sessions "$FAILOVER_SESSIONS" \
        --zk-log "$work/zk/zookeeper.log" --zk-pid "$zk_pid" | tee "$out"
    echo "   run $run ended $(date -u +%FT%TZ), load average $(cut -d' ' -f1-3 /proc/loadavg)"
    outputs+=("$out")
done
echo "== $RUNS runs in $(($(date +%s) - started)) s; min / median / max"
"$JAVA" -cp "$cp" CuratorBench summarize "${outputs[@]}"
