#!/usr/bin/env bash
# Regenerates the gRPC stubs in src/leasehold/_proto/ from
# proto/leasehold/v1/leasehold.proto, the API specification shared by every
# client. The generated files are kept in the tree, so that users can
# `pip install` the package without grpcio-tools; tests/test_generated.py
# fails when they are stale.
#
# Usage: ./generate.sh [OUT_DIR]   (default: src/leasehold/_proto)
# Python: $PYTHON, else the "oldest" test virtualenv of run-tests.sh if
# present, else python3; it needs grpcio-tools 1.63.0 (pyproject.toml's
# `generate` extra: the oldest that writes protobuf 5 gencode, so that the
# package works with protobuf 5.26.1 to 7.x; see pyproject.toml).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
proto_root="$(cd "$here/../../proto" && pwd)"
out="${1:-$here/src/leasehold/_proto}"
python="${PYTHON:-}"
if [ -z "$python" ]; then
  oldest="${LEASEHOLD_PY_VENVS:-$HOME/.cache/leasehold-python}/oldest/bin/python"
  if [ -x "$oldest" ]; then python="$oldest"; else python=python3; fi
fi

if ! "$python" -c 'import grpc_tools' >/dev/null 2>&1; then
  echo "generate.sh: $python has no grpc_tools: pip install 'grpcio-tools==1.63.0' (or run ./run-tests.sh once, then retry)" >&2
  exit 1
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$python" -m grpc_tools.protoc -I "$proto_root" \
  --python_out="$tmp" --pyi_out="$tmp" --grpc_python_out="$tmp" \
  leasehold/v1/leasehold.proto

# protoc writes `from leasehold.v1 import leasehold_pb2`, an absolute import
# of a package that does not exist here (and whose name clashes with ours):
# make it relative to _proto.
gen="$tmp/leasehold/v1"
sed -i 's/^from leasehold\.v1 import leasehold_pb2 as /from . import leasehold_pb2 as /' "$gen/leasehold_pb2_grpc.py"
if grep -q '^from leasehold\.v1 import' "$gen/leasehold_pb2_grpc.py"; then
  echo "generate.sh: could not rewrite the absolute import in leasehold_pb2_grpc.py" >&2
  exit 1
fi

mkdir -p "$out"
rm -f "$out"/leasehold_pb2*.py "$out"/leasehold_pb2*.pyi
cp "$gen/leasehold_pb2.py" "$gen/leasehold_pb2.pyi" "$gen/leasehold_pb2_grpc.py" "$out/"
cat > "$out/__init__.py" <<'PY'
"""Stubs generated from proto/leasehold/v1/leasehold.proto by generate.sh.

Do not edit: run clients/python/generate.sh after changing the .proto.
"""
PY
echo "generated $(ls "$out" | tr '\n' ' ')in $out"
