#!/usr/bin/env bash
# CPU one task costs the daemon's task log (internal/tasklog), whole
# process: the logger and the tee, the publisher, and the embedded NATS
# server storing the lines (fsync on every write, as loomd serve). Runs
# BenchmarkTaskLog's cases (a task logging 0, 1 and 10 lines) with
# -benchtime 1x and Nx, and takes the test binary's user+sys CPU:
# (CPU(Nx) - 2*CPU(1x)) / N, since an Nx run also runs the benchmark once
# with N=1 first (and sets the store up twice). Tasks run one after
# another. Prints microseconds of CPU per task, ROUNDS times each.
#
#   bench/tasklog-cpu.sh [ROUNDS]     # default 2
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-2}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go test -c -o "$tmp/tasklog.test" ./internal/tasklog/
cpu() { # BENCH N -> seconds of user+sys CPU of one run
  local TIMEFORMAT='%U %S' t
  t=$( { time (cd internal/tasklog && LOOM_TASKLOG_SETTLE=0s "$tmp/tasklog.test" -test.run XXX \
    -test.bench "$1" -test.benchtime "${2}x" >/dev/null 2>&1); } 2>&1)
  awk '{print $1 + $2}' <<<"$t"
}
for spec in 0:200000 1:10000 10:10000; do
  lines=${spec%%:*} n=${spec##*:}
  for r in $(seq "$rounds"); do
    one=$(cpu "BenchmarkTaskLog/lines=$lines\$" 1)
    many=$(cpu "BenchmarkTaskLog/lines=$lines\$" "$n")
    awk -v l="$lines" -v r="$r" -v n="$n" -v one="$one" -v many="$many" 'BEGIN {
      printf "lines=%s round %s: 1x %.3fs, %dx %.3fs CPU -> %.1f us CPU per task\n", l, r, one, n, many, (many - 2*one) / n * 1e6 }'
  done
done
