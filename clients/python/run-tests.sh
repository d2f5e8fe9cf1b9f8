#!/usr/bin/env bash
# Runs the Python client's tests against a real broker (memory store).
#
# Safe to run again: creates clients/python/.venv if missing (installing
# Debian's python3-venv when `python3 -m venv` cannot work), installs the
# package in editable mode with its test dependencies when pyproject.toml
# changed, and runs pytest. Builds nothing: the broker binary is $LEASEHOLD_BIN,
# or target/debug/leasehold (cargo build --bin leasehold).
# Extra arguments go to pytest, e.g. ./run-tests.sh -k fence -v
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$here"

bin="${LEASEHOLD_BIN:-$repo/target/debug/leasehold}"
if [ ! -x "$bin" ]; then
  echo "error: broker binary not found at $bin" >&2
  echo "  build it with 'cargo build --bin leasehold' in $repo, or set LEASEHOLD_BIN to a leasehold binary" >&2
  exit 1
fi
export LEASEHOLD_BIN="$bin"

if ! command -v python3 >/dev/null 2>&1; then
  echo "error: python3 is missing (Python >= 3.9 is needed)" >&2
  exit 1
fi

# Debian splits venv's pip bootstrap (ensurepip) into python3-venv.
if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "error: 'python3 -m venv' does not work here and apt-get is not available: install the venv module for $(python3 --version)" >&2
    exit 1
  fi
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  echo "Installing python3-venv from Debian's packages..."
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
fi

venv="$here/.venv"
# A venv whose creation failed half-way has no working pip: start again.
if ! "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
  rm -rf "$venv"
  python3 -m venv "$venv"
fi

stamp="$venv/.leasehold-installed"
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -e ".[test]"
  echo "$want" > "$stamp"
fi

exec "$venv/bin/python" -m pytest -q "$@"
