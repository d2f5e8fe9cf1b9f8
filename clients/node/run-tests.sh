#!/usr/bin/env bash
# Runs the Node.js client's checks against a real broker:
# - npm ci (the locked dependencies, from the npm registry), only when
#   node_modules is missing or package-lock.json changed since the last install;
# - the build (npm run build: the proto copied into the package, tsc) and the
#   type check (tsc --noEmit of src/ and of test/smoke/usage.mts, a typed usage);
# - node --test: the client against `leasehold serve` (memory store; TLS,
#   tokens), two brokers sharing a redis-server (failover), the fence guards
#   against a PostgreSQL the tests start (Debian's postgresql package,
#   installed here when missing), and the package as users get it (npm pack,
#   npm install of the tarball in an empty folder outside the repository, its
#   ES module and CommonJS entry points run).
# Safe to run again. Installs no Node and builds no broker: the broker binary
# is $LEASEHOLD_BIN, or target/debug/leasehold (cargo build --bin leasehold).
# Extra arguments go to node --test, e.g. ./run-tests.sh --test-name-pattern=fence
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$here"

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "error: node and npm are needed (Node.js >= 18; Debian: apt-get install nodejs npm)" >&2
  exit 1
fi
major="$(node -p 'process.versions.node.split(".")[0]')"
if [ "$major" -lt 18 ]; then
  echo "error: Node.js >= 18 is needed, found $(node --version)" >&2
  exit 1
fi

bin="${LEASEHOLD_BIN:-$repo/target/debug/leasehold}"
if [ ! -x "$bin" ]; then
  echo "error: broker binary not found at $bin" >&2
  echo "  build it with 'cargo build --bin leasehold' in $repo, or set LEASEHOLD_BIN to a leasehold binary" >&2
  exit 1
fi
export LEASEHOLD_BIN="$bin"

# The fence SQL tests start their own PostgreSQL (initdb and postgres of
# Debian's postgresql package, as the postgres user when run as root).
if ! compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null && [ -z "${LEASEHOLD_PG_BIN:-}" ]; then
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

stamp="node_modules/.leasehold-installed"
want="$(sha256sum package-lock.json | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  npm ci --no-audit --no-fund
  echo "$want" > "$stamp"
fi

echo "node $(node --version), npm $(npm --version)"
npm run --silent build
npm run --silent typecheck
exec node --test "$@" test/*.test.mjs
