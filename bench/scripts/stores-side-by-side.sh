#!/usr/bin/env bash
# The broker on ZooKeeper, Redis, PostgreSQL and etcd under the same load
# generator (BENCHMARKS.md, "ZooKeeper store: the broker on ZooKeeper
# beside Redis, PostgreSQL, etcd and Curator"): ROUNDS rounds, each
# `leasehold-bench cycles` (1/16/64 workers, one lock with 16 waiters, 3
# killed holders) then `leasehold-bench heartbeats` (10,000 leases over
# 100 streams, 15 s) on each store in turn. One server of each, started
# here on loopback ports of their own, with their durable defaults:
# ZooKeeper 3.8 standalone (fsync on, tickTime 2 s, TTL nodes on, as the
# store requires), etcd one member (compacted before each of its runs),
# Redis without persistence, PostgreSQL with fsync and synchronous_commit
# on. Before each run it waits (up to 2 minutes) for a 1-minute load
# average under WAIT_LOAD. Each run's output goes to $OUT/<round>-<kind>-<store>.txt.
#
# Needs release builds (cargo build --release --workspace --bins), and
# Debian's zookeeper, etcd-server, redis-server and postgresql (as
# scripts/test installs them). Run as root (PostgreSQL runs as `postgres`).
#
# Settings (environment): ROUNDS=3 OUT=target/side-by-side WAIT_LOAD=1.0
#   STORES="zookeeper redis postgres etcd"
set -euo pipefail
cd "$(dirname "$0")/../.."

ROUNDS=${ROUNDS:-3}
OUT=${OUT:-target/side-by-side}
WAIT_LOAD=${WAIT_LOAD:-1.0}
STORES=${STORES:-zookeeper redis postgres etcd}
B=target/release/leasehold-bench
[ -x "$B" ] && [ -x target/release/leasehold ] || {
  echo "build first: cargo build --release --workspace --bins" >&2
  exit 1
}
mkdir -p "$OUT"
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  redis-cli -p "$REDIS_PORT" shutdown nosave >/dev/null 2>&1 || true
  runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$work/pg" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
ZK_PORT=$(free_port) REDIS_PORT=$(free_port) PG_PORT=$(free_port)
ETCD_PORT=$(free_port) ETCD_PEER=$(free_port)

# ZooKeeper, standalone.
mkdir -p "$work/zk/data"
cat >"$work/zk/zoo.cfg" <<EOF
tickTime=2000
dataDir=$work/zk/data
clientPort=$ZK_PORT
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=srvr,ruok,mntr
EOF
(cd "$work/zk" && exec java -Xmx512m -Dzookeeper.extendedTypesEnabled=true \
  -Djava.io.tmpdir="$work/zk" \
  -cp /usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar \
  org.apache.zookeeper.server.quorum.QuorumPeerMain "$work/zk/zoo.cfg" \
  >"$work/zk/zookeeper.log" 2>&1) &
pids+=("$!")
# etcd, one member.
etcd --data-dir "$work/etcd" --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER" \
  --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER" \
  --initial-cluster "default=http://127.0.0.1:$ETCD_PEER" >"$work/etcd.log" 2>&1 &
pids+=("$!")
# Redis, no persistence.
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
  --daemonize yes --logfile "$work/redis.log"
# PostgreSQL, its defaults.
PG_BIN=$(dirname "$(compgen -G '/usr/lib/postgresql/*/bin/initdb' | sort -V | tail -1)")
mkdir -p "$work/pg" && chown postgres "$work" "$work/pg"
runuser -u postgres -- "$PG_BIN/initdb" -D "$work/pg" -U postgres --auth=trust >/dev/null
runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$work/pg" -l "$work/pg.log" -w \
  -o "-p $PG_PORT -k $work -c listen_addresses=127.0.0.1 -c max_connections=200" start >/dev/null

until { exec 3<>"/dev/tcp/127.0.0.1/$ZK_PORT" && printf srvr >&3 && timeout 2 cat <&3; } 2>/dev/null | grep -q '^Mode:'; do sleep 0.2; done
until curl -sf "http://127.0.0.1:$ETCD_PORT/health" >/dev/null; do sleep 0.2; done

url() {
  case $1 in
    zookeeper) echo "zookeeper://127.0.0.1:$ZK_PORT" ;;
    redis) echo "redis://127.0.0.1:$REDIS_PORT" ;;
    postgres) echo "postgres://postgres@127.0.0.1:$PG_PORT/postgres" ;;
    etcd) echo "etcd://127.0.0.1:$ETCD_PORT" ;;
  esac
}
compact() {
  local r
  r=$(curl -s -X POST "http://127.0.0.1:$ETCD_PORT/v3/maintenance/status" -d '{}' |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["header"]["revision"])')
  curl -s -X POST "http://127.0.0.1:$ETCD_PORT/v3/kv/compaction" \
    -d "{\"revision\": \"$r\", \"physical\": true}" >/dev/null
}
quiet() {
  local waited=0
  while awk -v max="$WAIT_LOAD" '{ exit !($1 >= max) }' /proc/loadavg && [ $waited -lt 120 ]; do
    sleep 5
    waited=$((waited + 5))
  done
  echo "load $(cut -d' ' -f1-3 /proc/loadavg) after waiting ${waited}s"
}

echo "$(date -u '+%F %T') UTC; $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; commit $(git rev-parse --short HEAD)" | tee "$OUT/machine.txt"
for round in $(seq 1 "$ROUNDS"); do
  for kind in cycles heartbeats; do
    for store in $STORES; do
      extra=()
      if [ "$store" = etcd ]; then
        compact
        extra=(--etcd "http://127.0.0.1:$ETCD_PORT")
      fi
      if [ "$kind" = cycles ]; then
        args=(cycles --store "$(url "$store")" --workers 1,16,64 --contended 16 --failovers 3)
      else
        args=(heartbeats --store "$(url "$store")" --leases 10000 --streams 100 --duration 15s)
      fi
      file="$OUT/$round-$kind-$store.txt"
      echo "== round $round, $kind on $store: $(quiet)"
      "$B" "${args[@]}" "${extra[@]}" >"$file" 2>&1 || echo "FAILED: see $file"
    done
  done
done
echo "outputs in $OUT"
