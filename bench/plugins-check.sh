#!/usr/bin/env bash
# What `loomd plugins check --strict` costs on the bundled plugins folder
# with the binary before the lint of Lua code (global writes, binding
# option keys, shadowing and unreachable code; BASE) and the current one,
# alternately N times; prints the median wall time and CPU time (user+sys:
# on a shared machine wall time measures the load) of each, their ranges,
# and the ratios. Both must find the folder clean (a failing check stops
# the script).
#   bench/plugins-check.sh [N] [BASE] [DIR]   (run from the repository root)
set -euo pipefail
n=${1:-11}
base=${2:-$(git log --format=%H --grep="plugins check: a global set inside a function with no load-time value" -1)^}
dir=${3:-plugins}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/src"
git archive "$base" | tar -x -C "$tmp/src"
(cd "$tmp/src" && go build -o "$tmp/loomd-base" ./cmd/loomd)
go build -o "$tmp/loomd-new" ./cmd/loomd
median() { sort -n | awk '{a[NR]=$1} END {printf "%.3f\n", a[int((NR+1)/2)]}'; }
range() { sort -n | awk 'NR==1 {lo=$1} {hi=$1} END {printf "%.3f-%.3f\n", lo, hi}'; }
# wall and CPU seconds of one run (the child's rusage: /usr/bin/time rounds
# to 10 ms, a tenth of a run)
run() {
  python3 -c 'import resource, subprocess, sys, time
t = time.monotonic()
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print("%.4f %.4f" % (time.monotonic() - t, r.ru_utime + r.ru_stime))' "$@"
}
for i in $(seq "$n"); do
  run "$tmp/loomd-base" plugins check --strict "$dir" >>"$tmp/base"
  run "$tmp/loomd-new" plugins check --strict "$dir" >>"$tmp/new"
done
stat() { echo "$(awk -v c="$1" '{print $c}' "$2" | median)s ($(awk -v c="$1" '{print $c}' "$2" | range))"; }
ratio() { echo "scale=2; $(awk -v c="$1" '{print $c}' "$tmp/new" | median) / $(awk -v c="$1" '{print $c}' "$tmp/base" | median)" | bc; }
echo "loomd plugins check --strict $dir ($n runs each, alternated; median (range))"
echo "  before ($(git rev-parse --short "$base")): wall $(stat 1 "$tmp/base"), CPU $(stat 2 "$tmp/base")"
echo "  now:             wall $(stat 1 "$tmp/new"), CPU $(stat 2 "$tmp/new")"
echo "  ratio now/before: wall $(ratio 1), CPU $(ratio 2)"
