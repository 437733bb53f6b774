#!/usr/bin/env bash
# What idle console pages cost loomd serve: the daemon's CPU time (utime +
# stime from /proc) over a window with no page open, then with 1 and with
# 50 idle pages, each holding its event stream (the overview's topic: the
# one that also samples the task metrics every 10 s while watched). No task
# runs. Prints CPU% of one core per window.
#
#   bench/console-idle-cpu.sh [SECONDS]     # default 60 per window
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
go build -o "$tmp/loomd" ./cmd/loomd
mkdir -p "$tmp/plugins"
port=$((20000 + RANDOM % 20000))
"$tmp/loomd" serve --listen "127.0.0.1:$port" --data "$tmp/data" --work-dir "$tmp/work" --plugins "$tmp/plugins" \
  --isolation none --log-level warn 2>"$tmp/serve.log" &
daemon=$!
pids+=("$daemon")
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
curl -sf -c "$tmp/jar" "http://127.0.0.1:$port/ui/" >/dev/null
tck=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$daemon/stat"; }
window() {
  sleep 5 # let the streams settle
  local a b
  a=$(cpu)
  sleep "$secs"
  b=$(cpu)
  awk -v d="$((b - a))" -v t="$tck" -v s="$secs" -v what="$1" 'BEGIN { printf "%-28s %6.3f%% of a core (%d ticks in %ds)\n", what, 100 * d / t / s, d, s }'
}
window "no page open"
open_streams() {
  for _ in $(seq "$1"); do
    curl -sN -b "$tmp/jar" "http://127.0.0.1:$port/ui/events?topic=overview&topic=tasks" >/dev/null &
    pids+=("$!")
  done
}
open_streams 1
window "1 idle page"
open_streams 49
window "50 idle pages"
