#!/usr/bin/env bash
# The whole test suite, exactly as CI runs it (.ci/run calls this script).
# Installs redis-server (and openssl) with apt when missing and we are root; the tests start
# their own private redis-server processes on free loopback ports.
set -euo pipefail
cd "$(dirname "$0")/.."

# redis-server for every integration test; openssl makes the TLS test's certificates.
missing=()
command -v "${FENCELOCK_REDIS_SERVER:-redis-server}" >/dev/null 2>&1 || missing+=(redis-server)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "== installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "missing: ${missing[*]}: install them (sudo apt-get install ${missing[*]})," \
      "or set FENCELOCK_REDIS_SERVER to redis-server's path" >&2
    exit 1
  fi
fi
"${FENCELOCK_REDIS_SERVER:-redis-server}" --version

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --all-features -- -D warnings
echo "== cargo test"
cargo test --workspace --all-features
