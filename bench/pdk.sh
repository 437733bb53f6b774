#!/usr/bin/env bash
# What loomd test costs CI, against the Go suite of the same plugin in
# the same run: the median wall time of N runs of each, with its range.
#   bench/pdk.sh [N]   (default 5; run from the repository root)
set -euo pipefail
n=${1:-5}
go build -o bin/loomd ./cmd/loomd
go test -c -o bin/digitalocean.test ./plugins/digitalocean/
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
median() { sort -n | awk '{a[NR]=$1} END {printf "%.3f\n", a[int((NR+1)/2)]}'; }
range() { sort -n | awk 'NR==1 {lo=$1} {hi=$1} END {printf "%.3f-%.3f\n", lo, hi}'; }
wall() { local s e; s=$(date +%s.%N); "$@" >/dev/null 2>&1; e=$(date +%s.%N); echo "$e - $s" | bc; }
for _ in $(seq "$n"); do wall bin/loomd test plugins/digitalocean; done >"$tmp/lua"
for _ in $(seq "$n"); do (cd plugins/digitalocean && wall ../../bin/digitalocean.test -test.count=1); done >"$tmp/go"
# with and without --coverage alternated, so that load changes hit both
for _ in $(seq "$n"); do
  wall bin/loomd test plugins/... examples/... >>"$tmp/all"
  wall bin/loomd test plugins/... examples/... --coverage >>"$tmp/cover"
done
for _ in $(seq "$n"); do wall bin/loomd test plugins/shell; done >"$tmp/shell"
m() { median <"$tmp/$1"; }
s() { echo "$(m "$1")s ($(range <"$tmp/$1"))"; }
echo "loomd test plugins/digitalocean (Lua suite):      $(s lua)"
echo "digitalocean Go suite (prebuilt test binary):     $(s go)"
echo "ratio Lua/Go:                                     $(echo "scale=2; $(m lua) / $(m go)" | bc)"
echo "loomd test plugins/... examples/... (all suites): $(s all)"
echo "  the same with --coverage:                       $(s cover) (ratio $(echo "scale=2; $(m cover) / $(m all)" | bc))"
echo "loomd test plugins/shell (SSH fake host suite):   $(s shell)"
