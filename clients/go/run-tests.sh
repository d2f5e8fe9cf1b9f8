#!/usr/bin/env bash
# Runs the Go client's tests against a real broker (memory store; a real
# redis-server where two brokers share a store; a real PostgreSQL, started
# by the test in a temporary folder, for the fence guards), offline: Go,
# the gRPC and protobuf libraries and the lib/pq driver come from Debian's
# packages (golang-go, golang-google-grpc-dev 1.33,
# golang-google-protobuf-dev 1.28, golang-google-genproto-dev,
# golang-github-lib-pq-dev 1.10), built in GOPATH mode beside their sources
# in /usr/share/gocode: nothing is downloaded. (With the module ecosystem,
# `go test ./...` in this folder does the same against the versions go.mod
# names: see README.md.)
#
#   1. the stubs in leaseholdv1/ are generated again from the proto
#      (generate.sh) and must not differ from the ones in the tree;
#   2. go.mod parses; gofmt and go vet are clean;
#   3. go test: the unit tests, and the tests that start brokers (contention,
#      renewal over several TTLs, a broker killed, failover to a second
#      broker, a broker's shutdown, revoke, elections, TLS and tokens, a
#      wait longer than --max-wait, TTL advice through a delaying proxy and
#      WithTTLAuto), the fence guards (SQL on PostgreSQL, with a holder
#      paused past its TTL whose late write is refused; the object-store
#      guard on an in-memory store that checks preconditions as S3 does;
#      CheckFence before a side effect), and one that builds the package's
#      invoice job as a program outside the repository from a copy of this
#      folder alone.
#
# Installs what it needs from Debian's packages when missing; safe to run
# again. Builds nothing in Rust: the broker is $LEASEHOLD_BIN, or
# target/debug/leasehold (cargo build --bin leasehold). Extra arguments go
# to go test (e.g. ./run-tests.sh -run Failover -v).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$here"

packages=(golang-go golang-google-grpc-dev golang-google-protobuf-dev golang-google-genproto-dev
  golang-github-golang-protobuf-1-3-dev golang-github-lib-pq-dev protobuf-compiler protoc-gen-go protoc-gen-go-grpc
  redis-server postgresql)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "error: ${missing[*]} missing and apt-get is not available: install Go >= 1.19, grpc-go, protobuf-go, genproto, lib/pq, protoc with protoc-gen-go(-grpc), redis-server and PostgreSQL" >&2
    exit 1
  fi
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  echo "Installing ${missing[*]} from Debian's packages..."
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

bin="${LEASEHOLD_BIN:-$repo/target/debug/leasehold}"
if [ ! -x "$bin" ]; then
  echo "error: broker binary not found at $bin" >&2
  echo "  build it with 'cargo build --bin leasehold' in $repo, or set LEASEHOLD_BIN to a leasehold binary" >&2
  exit 1
fi
LEASEHOLD_BIN="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"
export LEASEHOLD_BIN

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

echo "== Go client: stubs up to date ($(protoc --version), protoc-gen-go $(protoc-gen-go --version 2>&1 | awk '{print $NF}'))"
./generate.sh "$tmp/gen"
if ! diff -r leaseholdv1 "$tmp/gen/leaseholdv1" >"$tmp/stubs.diff"; then
  head -40 "$tmp/stubs.diff" >&2
  echo "error: clients/go/leaseholdv1 is stale: the proto changed; run clients/go/generate.sh and commit the result" >&2
  exit 1
fi

module="$(sed -n 's/^module[[:space:]]*//p' go.mod)"
deps="${LEASEHOLD_GO_DEPS:-/usr/share/gocode}"
gopath="$tmp/gopath"
mkdir -p "$(dirname "$gopath/src/$module")"
ln -s "$here" "$gopath/src/$module"
export GO111MODULE=off GOPATH="$gopath:$deps" GOPROXY=off GOFLAGS= LEASEHOLD_GO_DEPS="$deps"
export GOCACHE="${XDG_CACHE_HOME:-$HOME/.cache}/leasehold/go-build"

echo "== Go client: go.mod, gofmt, go vet ($(go version | awk '{print $3}'), grpc-go $(sed -n 's/^const Version = "\(.*\)"/\1/p' "$deps/src/google.golang.org/grpc/version.go"))"
GO111MODULE=on go mod edit -json >/dev/null
unformatted="$(gofmt -l .)"
if [ -n "$unformatted" ]; then
  echo "error: gofmt would change: $unformatted" >&2
  exit 1
fi
cd "$gopath/src/$module"
# Each package by name: "..." does not follow the symlink.
go vet "$module" "$module/leaseholdv1"

echo "== Go client: go test (broker $LEASEHOLD_BIN)"
go test -count=1 "$@" "$module" "$module/leaseholdv1"
