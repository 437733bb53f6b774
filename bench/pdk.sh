#!/usr/bin/env bash
# What loomd test costs CI, against the Go suite of the same plugin in
# the same run: the median wall time of N runs of each.
#   bench/pdk.sh [N]   (default 5; run from the repository root)
set -euo pipefail
n=${1:-5}
go build -o bin/loomd ./cmd/loomd
go test -c -o bin/digitalocean.test ./plugins/digitalocean/
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
wall() { local s e; s=$(date +%s.%N); "$@" >/dev/null 2>&1; e=$(date +%s.%N); echo "$e - $s" | bc; }
lua=$(for _ in $(seq "$n"); do wall bin/loomd test plugins/digitalocean; done | median)
gosuite=$(for _ in $(seq "$n"); do (cd plugins/digitalocean && wall ../../bin/digitalocean.test -test.count=1); done | median)
all=$(for _ in $(seq "$n"); do wall bin/loomd test plugins/... examples/...; done | median)
shell=$(for _ in $(seq "$n"); do wall bin/loomd test plugins/shell; done | median)
cover=$(for _ in $(seq "$n"); do wall bin/loomd test plugins/... examples/... --coverage; done | median)
echo "loomd test plugins/digitalocean (Lua suite):      ${lua}s"
echo "digitalocean Go suite (prebuilt test binary):     ${gosuite}s"
echo "ratio Lua/Go:                                     $(echo "scale=2; $lua / $gosuite" | bc)"
echo "loomd test plugins/... examples/... (all suites): ${all}s"
echo "  the same with --coverage:                       ${cover}s (ratio $(echo "scale=2; $cover / $all" | bc))"
echo "loomd test plugins/shell (SSH fake host suite):   ${shell}s"
