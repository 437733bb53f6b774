#!/usr/bin/env bash
# The named runtime errors of the vendored gopher-lua (loom_errnames.go)
# cost nothing on code that raises nothing: the same benchmarks built
# against the copy before the patch (baseline) and the current one, run
# alternately N times; prints each snippet's median CPU time per op (the
# benchmark thread's: on a shared machine wall time measures the load),
# each side's range, and the ratios current/baseline of the medians, of
# the minimums and of the median wall times. NormalPath raises nothing;
# ErrorPath raises and catches 2000 errors per op (named with the patch,
# unnamed before).
#   bench/errnames/run.sh [N] [BASE]   (default 5; BASE: the commit before
#   loom_errnames.go was added; run from the repository root)
set -euo pipefail
n=${1:-5}
base=${2:-$(git log --diff-filter=A --format=%H -1 -- third_party/gopher-lua/loom_errnames.go)^}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/base" "$tmp/new/third_party"
git archive "$base" third_party/gopher-lua | tar -x -C "$tmp/base"
cp -r third_party/gopher-lua "$tmp/new/third_party/"
for v in base new; do
  mkdir -p "$tmp/m-$v"
  cp bench/errnames/errnames_bench_test.go.in "$tmp/m-$v/errnames_bench_test.go"
  cat >"$tmp/m-$v/go.mod" <<MOD
module errnames
go 1.24
require github.com/yuin/gopher-lua v1.1.2
replace github.com/yuin/gopher-lua => $tmp/$v/third_party/gopher-lua
MOD
  (cd "$tmp/m-$v" && GOFLAGS=-mod=mod go test -c -o "$tmp/$v.test" . >/dev/null)
done
for i in $(seq "$n"); do
  for v in base new; do
    "$tmp/$v.test" -test.run XXX -test.bench 'NormalPath|ErrorPath' -test.benchtime 20x | awk -v v=$v '/^Benchmark/ {print v, $1, $3, $5}' >>"$tmp/out"
  done
done
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
range() { sort -n | awk 'NR==1 {lo=$1} {hi=$1} END {print lo "-" hi}'; }
# per op: the benchmark thread's CPU time (column 4), then wall time (3)
col() { awk -v v="$1" -v b="$2" -v c="$3" '$1==v && $2==b {print $c}' "$tmp/out"; }
printf "%-32s %10s %20s %10s %20s %6s %6s %6s\n" snippet "base cpu" "(range)" "new cpu" "(range)" ratio "(min)" "(wall)"
for b in $(awk '{print $2}' "$tmp/out" | sort -u); do
  mb=$(col base "$b" 4 | median); rb=$(col base "$b" 4 | range)
  mn=$(col new "$b" 4 | median); rn=$(col new "$b" 4 | range)
  wb=$(col base "$b" 3 | median); wn=$(col new "$b" 3 | median)
  printf "%-32s %10s %20s %10s %20s %6s %6s %6s\n" "${b#Benchmark}" "$mb" "$rb" "$mn" "$rn" \
    "$(echo "scale=3; $mn / $mb" | bc)" "$(echo "scale=3; ${rn%-*} / ${rb%-*}" | bc)" "$(echo "scale=3; $wn / $wb" | bc)"
done
