#!/usr/bin/env bash
# The named runtime errors of the vendored gopher-lua (loom_errnames.go)
# cost nothing on code that raises nothing: the same benchmarks built
# against the copy before the patch (baseline) and the current one, run
# alternately N times; prints each snippet's median ns/op and the ratio
# current/baseline.
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
    "$tmp/$v.test" -test.run XXX -test.bench NormalPath -test.benchtime 20x | awk -v v=$v '/^Benchmark/ {print v, $1, $3}' >>"$tmp/out"
  done
done
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
printf "%-28s %14s %14s %8s\n" snippet "baseline ns/op" "patched ns/op" ratio
for b in $(awk '{print $2}' "$tmp/out" | sort -u); do
  mb=$(awk -v b="$b" '$1=="base" && $2==b {print $3}' "$tmp/out" | median)
  mn=$(awk -v b="$b" '$1=="new" && $2==b {print $3}' "$tmp/out" | median)
  printf "%-28s %14s %14s %8s\n" "$b" "$mb" "$mn" "$(echo "scale=3; $mn / $mb" | bc)"
done
