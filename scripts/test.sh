#!/usr/bin/env bash
# The whole test suite, exactly as CI runs it (.ci/run calls this script).
# Installs redis-server, openssl, nftables, zookeeper (with Java), etcd-server and protoc with
# apt when missing and we are root; the tests start their own private redis-server processes
# (and Sentinels), ZooKeeper ensembles and etcd clusters on free loopback ports. The
# SQL backends' tests use the machine's PostgreSQL and MariaDB (scripts/databases.sh starts,
# or installs and starts, what does not answer), each test on lock tables of its own.
#
# `cargo test` runs a slice of the long checks within CI's budget: the simulation's 1,000 seeds
# (every lock kind, and each planted defect caught) and every fault scenario of the torture
# run for 3 s, 6 s on SQL (every store and lock kind; `bench/tests/torture.rs`).
#
# `scripts/test.sh --extended` then also runs the simulation for 20,000 seeds (release build,
# the planted defects too), fuzzes the key-template parser and the attribute (cargo-fuzz, 60 s
# each; installs cargo-fuzz when missing) and runs the fault scenarios for 20 s each
# (docs/RELIABILITY.md).
set -euo pipefail
cd "$(dirname "$0")/.."
extended=false
[ "${1:-}" = "--extended" ] && extended=true

# redis-server for every integration test (Sentinels too); openssl makes the TLS test's
# certificates; nft cuts a replication link in the Sentinel failover tests (they need root).
# Without root those tests say that they skip (and fail in CI, where `CI` is set).
export PATH="$PATH:/usr/sbin:/sbin"
missing=()
command -v "${FENCELOCK_REDIS_SERVER:-redis-server}" >/dev/null 2>&1 || missing+=(redis-server)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
if ! command -v nft >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  missing+=(nftables)
fi
# The ZooKeeper and etcd backends' tests start private servers from Debian's packages (on
# Java for ZooKeeper); etcd-client's build compiles etcd's protocol with protoc.
[ -n "${FENCELOCK_ZOOKEEPER_CLASSPATH:-}" ] || [ -e /usr/share/java/zookeeper.jar ] || missing+=(zookeeper)
command -v java >/dev/null 2>&1 || missing+=(default-jre-headless)
command -v "${FENCELOCK_ETCD:-etcd}" >/dev/null 2>&1 || missing+=(etcd-server)
command -v "${PROTOC:-protoc}" >/dev/null 2>&1 || missing+=(protobuf-compiler)
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
# PostgreSQL and MariaDB for the SQL backends (installed and started when missing, as root).
bash scripts/databases.sh

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --all-features -- -D warnings
echo "== cargo clippy with one SQL feature (what an application with one database builds)"
for feature in postgres mysql; do
  cargo clippy -p fencelock --features "testing,$feature" -- -D warnings
done
echo "== without the stores' features: their URLs and constructors name the feature"
cargo test -q -p fencelock-runtime --lib open::
cargo test -q -p fencelock --test feature_off
echo "== cargo test"
cargo test --workspace --all-features
echo "== web flash sale, short run (three instances under load, with and without the lock)"
bash examples/web_flash_sale/run.sh --quick
echo "== segmented stock, short run (4 processes; fails on any unit sold twice)"
cargo run --all-features --example segmented_stock -- --quick
echo "== cargo doc"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --workspace --all-features
echo "== cargo package (each published library built from its package: no file left out)"
# Cargo takes a package it has unpacked or built once for good (registry crates never change
# within a version), so the packages of an earlier run would be what gets verified: drop the
# unpacked copies and what was built from them (in a target directory of this step's own,
# whose other crates stay built).
verify=target/package-verify
rm -rf "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/fencelock-{options-,macros-,runtime-,}[0-9]* \
  "$verify"/debug/.fingerprint/fencelock-* "$verify"/debug/deps/*fencelock*
cargo package --workspace --exclude fencelock-bench --exclude fencelock-web-flash-sale \
  --allow-dirty --target-dir "$verify"

if $extended; then
  echo "== simulation, 20,000 seeds"
  FENCELOCK_SIM_SEEDS=20000 cargo test --release --all-features --test simulation -- \
    --nocapture
  echo "== fuzzing (60 s per target)"
  command -v cargo-fuzz >/dev/null 2>&1 || cargo install --locked cargo-fuzz
  # cargo-fuzz passes nightly flags; RUSTC_BOOTSTRAP lets the one stable toolchain take them.
  for target in key_template attribute; do
    (cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run -s none "$target" \
      "corpus/$target" "seeds/$target" -- -max_total_time=60)
  done
  echo "== fault scenarios, 20 s each"
  cargo run --release -p fencelock-bench --bin torture
fi
