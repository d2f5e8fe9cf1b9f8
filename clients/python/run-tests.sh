#!/usr/bin/env bash
# Runs the Python client's tests against a real broker (memory store; a real
# redis-server where two brokers must share a store), on both ends of the
# supported dependency range, then builds the package and smoke-tests what a
# user would install:
#
#   1. "oldest": grpcio 1.63.0 + protobuf 5.26.1 + googleapis-common-protos
#      1.63.1 (the floors pyproject.toml declares) and grpcio-tools 1.63.0,
#      which generated the stubs (so the staleness test runs here): every
#      test.
#   2. "newest": the newest grpcio, protobuf 7 and googleapis-common-protos
#      (pinned below): every test but the staleness one (grpcio-tools 1.63
#      needs protobuf < 6). Only this venv has the fence guards' test
#      dependencies (psycopg, moto's S3 server, boto3: FENCE_TEST_DEPS), so
#      the fence tests (tests/test_fence_*.py: a real PostgreSQL, a real
#      moto_server) run here only: leasehold.fence does no gRPC, and the one
#      story that goes through the broker uses the client's plain
#      acquire, which every other test covers on both ends. In "oldest"
#      they are skipped; here LEASEHOLD_PY_FENCE_TESTS=1 makes a missing
#      dependency a failure instead. Debian's postgresql package is
#      installed when no initdb is found.
#   3. `python -m build` makes a wheel and an sdist; each is installed into a
#      fresh virtualenv outside the repo, which imports it, connects to a real
#      broker and takes and releases a lease, sync and asyncio
#      (tests/smoke_installed.py). The wheel's venv runs protobuf 6, the
#      middle of the range; the sdist's takes what pip resolves.
#
# Safe to run again: the virtualenvs live under $LEASEHOLD_PY_VENVS (default
# ~/.cache/leasehold-python) and are rebuilt only when pyproject.toml or the
# pins below change; pip's cache keeps the smoke venvs quick. Installs
# Debian's python3-venv when `python3 -m venv` cannot work. Builds nothing in
# Rust: the broker binary is $LEASEHOLD_BIN, or target/debug/leasehold
# (cargo build --bin leasehold).
# Extra arguments go to pytest (both environments), e.g. ./run-tests.sh -k fence -v;
# LEASEHOLD_PY_SMOKE=0 skips step 3.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$here"

# The two ends of the range that are tested. OLDEST must match the floors in
# pyproject.toml; NEWEST is the newest release when last updated.
OLDEST_PINS=(grpcio==1.63.0 protobuf==5.26.1 googleapis-common-protos==1.63.1 grpcio-tools==1.63.0)
NEWEST_PINS=(grpcio==1.85.3 protobuf==7.36.2 googleapis-common-protos==1.76.0)
MIDDLE_PROTOBUF=protobuf==6.33.6
# moto 5.1.5 is the first whose S3 honours PutObject's If-Match and
# If-None-Match; botocore 1.35.65 the first that sends them.
FENCE_TEST_DEPS=("psycopg[binary]>=3.2" "moto[server]>=5.1.5" "boto3>=1.35.65")

bin="${LEASEHOLD_BIN:-$repo/target/debug/leasehold}"
if [ ! -x "$bin" ]; then
  echo "error: broker binary not found at $bin" >&2
  echo "  build it with 'cargo build --bin leasehold' in $repo, or set LEASEHOLD_BIN to a leasehold binary" >&2
  exit 1
fi
LEASEHOLD_BIN="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"
export LEASEHOLD_BIN

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

venvs="${LEASEHOLD_PY_VENVS:-$HOME/.cache/leasehold-python}"
mkdir -p "$venvs"
pip_install() { "$1/bin/python" -m pip install -q --disable-pip-version-check --only-binary=grpcio,grpcio-tools,protobuf "${@:2}"; }

# venv DIR PIP-ARGS...: DIR ready with the package (editable) and PIP-ARGS,
# reinstalled when pyproject.toml or the arguments change.
venv() {
  local dir="$1"; shift
  # A venv whose creation failed half-way has no working pip: start again.
  if ! "$dir/bin/python" -m pip --version >/dev/null 2>&1; then
    rm -rf "$dir"
    python3 -m venv "$dir"
  fi
  local stamp="$dir/.leasehold-installed"
  local want
  want="$( (cat pyproject.toml; echo "$here" "$@") | sha256sum | cut -d' ' -f1)"
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    pip_install "$dir" -e ".[test]" "$@"
    echo "$want" > "$stamp"
  fi
}

# The fence SQL tests start their own PostgreSQL (initdb and postgres of
# Debian's postgresql package, as the postgres user when run as root).
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && [ -z "${LEASEHOLD_PG_BIN:-}" ]; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "error: PostgreSQL's initdb was not found and apt-get is not available: install PostgreSQL or set LEASEHOLD_PG_BIN to its bin directory" >&2
    exit 1
  fi
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  echo "Installing postgresql from Debian's packages..."
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends postgresql >/dev/null
fi

venv "$venvs/oldest" "${OLDEST_PINS[@]}"
venv "$venvs/newest" "${NEWEST_PINS[@]}" "${FENCE_TEST_DEPS[@]}"

versions() {
  "$1/bin/python" -c 'import grpc, google.protobuf as p, importlib.metadata as m
g = m.version("googleapis-common-protos")
print(f"grpcio {grpc.__version__}, protobuf {p.__version__}, googleapis-common-protos {g}")'
}

echo "== Python client: oldest supported versions ($(versions "$venvs/oldest"))"
"$venvs/oldest/bin/python" -m pytest -q -p no:cacheprovider "$@"
echo "== Python client: newest versions ($(versions "$venvs/newest")), and the fence guards"
LEASEHOLD_PY_FENCE_TESTS=1 "$venvs/newest/bin/python" -m pytest -q -p no:cacheprovider \
  --deselect tests/test_generated.py::test_generated_code_is_not_stale "$@"

if [ "${LEASEHOLD_PY_SMOKE:-1}" = 0 ]; then
  exit 0
fi

echo "== Python client: wheel and sdist, installed in fresh virtualenvs"
venv_build="$venvs/build"
if ! "$venv_build/bin/python" -c 'import build' >/dev/null 2>&1; then
  rm -rf "$venv_build"
  python3 -m venv "$venv_build"
  pip_install "$venv_build" build
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$venv_build/bin/python" -m build -q --outdir "$work/dist" "$here" >"$work/build.log" 2>&1 \
  || { cat "$work/build.log" >&2; exit 1; }
wheel="$(ls "$work"/dist/*.whl)"
sdist="$(ls "$work"/dist/*.tar.gz)"
echo "built $(basename "$wheel") and $(basename "$sdist")"
cp tests/smoke_installed.py "$work/"
smoke() {
  local name="$1"; shift
  python3 -m venv "$work/$name"
  pip_install "$work/$name" "$@"
  # From $work, so that nothing of the source tree is importable.
  (cd "$work" && "$work/$name/bin/python" smoke_installed.py "$name ($(versions "$work/$name"))")
}
smoke wheel "$wheel" "$MIDDLE_PROTOBUF"
smoke sdist "$sdist"
