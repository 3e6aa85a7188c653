#!/usr/bin/env bash
# The flash sale as a web service under load: a private redis-server, three instances of the
# service on three ports, and the load generator sending orders at all three at once; first
# with #[redis_lock] (fails if a unit is oversold or an order fails), then without the lock
# (the oversell, shown, not failed on).
#
#   bash examples/web_flash_sale/run.sh [--quick]
#
# --quick: a short run (CI). Needs cargo and redis-server (or the binary named by
# FENCELOCK_REDIS_SERVER); never touches a Redis it did not start.
set -euo pipefail
cd "$(dirname "$0")/../.."

stock=100 orders=1000 concurrency=64
case "${1:-}" in
  "") ;;
  --quick) stock=50 orders=200 concurrency=16 ;;
  *) echo "unknown argument '$1': use --quick for a short run, or nothing" >&2; exit 2 ;;
esac
instances=3
sku=sku-1

cargo build --quiet --release -p fencelock-web-flash-sale
bin="${CARGO_TARGET_DIR:-target}/release/fencelock-web-flash-sale"

work=$(mktemp -d)
pids=()
cleanup() {
  local status=$?
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ "$status" -ne 0 ]; then
    for log in "$work"/*.log; do
      [ -s "$log" ] && { echo "--- ${log##*/}"; tail -n 20 "$log"; } >&2
    done
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Starts "$@" in the background (pid in `started_pid`, added to `pids`) and waits at most 10 s
# for a line of its standard output containing PATTERN, read from a FIFO as it is printed (the
# line is left in `ready_line`). Its output is copied to $work/NAME.log, its standard error to
# $work/NAME.err.log. Fails if the command exits or stays silent first.
start_and_await() {
  local name=$1 pattern=$2 fd line deadline=$((SECONDS + 10))
  shift 2
  mkfifo "$work/$name.fifo"
  "$@" >"$work/$name.fifo" 2>"$work/$name.err.log" &
  started_pid=$!
  pids+=("$started_pid")
  exec {fd}<"$work/$name.fifo"
  while [ "$SECONDS" -lt "$deadline" ] && IFS= read -r -t $((deadline - SECONDS)) -u "$fd" line; do
    echo "$line" >>"$work/$name.log"
    if [[ $line == *"$pattern"* ]]; then
      ready_line=$line
      cat <&"$fd" >>"$work/$name.log" &
      pids+=($!)
      exec {fd}<&-
      return 0
    fi
  done
  exec {fd}<&-
  return 1
}

# redis-server on a free loopback port: a port is free when the server could bind it, so try a
# few until one is (nothing else can take it between a check and the bind).
redis_url=
for attempt in 1 2 3 4 5; do
  port=$((20000 + RANDOM % 10000))
  if start_and_await "redis-$port" "Ready to accept connections" \
    "${FENCELOCK_REDIS_SERVER:-redis-server}" --port "$port" --bind 127.0.0.1 \
    --save "" --appendonly no; then
    redis_url="redis://127.0.0.1:$port/"
    break
  fi
done
[ -n "$redis_url" ] || { echo "redis-server did not start (tried 5 ports)" >&2; exit 1; }
echo "== web flash sale: $instances instances, redis-server at $redis_url"

# One run, NAME: the instances started with SERVE_FLAG (empty: with the lock) on free ports,
# the load at all of them with LOAD_FLAG, then the instances stopped; LABEL titles the table.
run() {
  local name=$1 label=$2 serve_flag=$3 load_flag=$4 targets=() phase_pids=() i
  for i in $(seq 1 "$instances"); do
    start_and_await "$name-$i" "listening on" \
      "$bin" serve --port 0 --redis "$redis_url" ${serve_flag:+"$serve_flag"} ||
      { echo "instance $i did not start listening within 10 s" >&2; return 1; }
    phase_pids+=("$started_pid")
    local url=${ready_line#listening on }
    targets+=("${url%% *}")
  done
  echo
  echo "== $label: instances at ${targets[*]}"
  local joined
  joined=$(IFS=,; echo "${targets[*]}")
  # In the background, so that a signal's trap runs at once rather than after the load.
  "$bin" load --targets "$joined" --redis "$redis_url" --sku "$sku" --stock "$stock" \
    --orders "$orders" --concurrency "$concurrency" ${load_flag:+"$load_flag"} &
  pids+=($!)
  wait $!
  kill "${phase_pids[@]}"
  wait "${phase_pids[@]}" 2>/dev/null || true
}

run locked "with #[redis_lock]" "" --strict
run unlocked "without a lock" --no-lock ""
