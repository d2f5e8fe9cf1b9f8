#!/usr/bin/env bash
# Generates the Go stubs of proto/leasehold/v1/leasehold.proto into
# leaseholdv1/ (package leaseholdv1 of this module), with Debian's protoc,
# protoc-gen-go and protoc-gen-go-grpc (installed when missing; safe to run
# again).
#
# The stubs are kept in the tree: `go get` cannot run protoc, so a module
# that users fetch from a proxy must carry its generated code. run-tests.sh
# generates them again into a temporary folder and fails when they differ
# from these (the proto changed, and this script was not run).
#
# Usage: generate.sh [OUT]   (OUT: where leaseholdv1/ goes; default: here)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="${1:-$here}"

packages=(protobuf-compiler protoc-gen-go protoc-gen-go-grpc)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "generate.sh: ${missing[*]} missing and apt-get is not available: install protoc, protoc-gen-go and protoc-gen-go-grpc" >&2
    exit 1
  fi
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  echo "Installing ${missing[*]} from Debian's packages..." >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

module="$(sed -n 's/^module[[:space:]]*//p' "$here/go.mod")"
proto=leasehold/v1/leasehold.proto
# The proto's go_package names a path of its own; here the package lives in
# this module, so that `go get` of the client brings it.
map="M$proto=$module/leaseholdv1;leaseholdv1"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$repo/proto" && protoc -I . \
  --go_out="$tmp" --go_opt=paths=source_relative --go_opt="$map" \
  --go-grpc_out="$tmp" --go-grpc_opt=paths=source_relative --go-grpc_opt="$map" \
  "$proto")
mkdir -p "$out/leaseholdv1"
cp "$tmp/leasehold/v1/leasehold.pb.go" "$tmp/leasehold/v1/leasehold_grpc.pb.go" "$out/leaseholdv1/"
