#!/usr/bin/env bash
# What running a test's hooks in its own VM costs (issue 25: the gate's
# instruction hook, nested hooks, the handlers' thread): loomd test on the
# same suites with the binary before that change (BASE) and the current
# one, alternately N times; prints the median wall time of each and the
# ratio. BASE defaults to the commit before "hooks of the test's type run
# in the test's own VM".
#   bench/pdk-vm.sh [N] [BASE]   (run from the repository root)
set -euo pipefail
n=${1:-7}
base=${2:-$(git log --format=%H --grep="hooks of the test's type run in the test's own VM" -1)^}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/src"
git archive "$base" | tar -x -C "$tmp/src"
(cd "$tmp/src" && go build -o "$tmp/loomd-base" ./cmd/loomd)
go build -o "$tmp/loomd-new" ./cmd/loomd
suites="plugins/digitalocean plugins/static plugins/aws plugins/google"
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
wall() { local s e; s=$(date +%s.%N); "$@" >/dev/null 2>&1; e=$(date +%s.%N); echo "$e - $s" | bc; }
for i in $(seq "$n"); do
  wall "$tmp/loomd-base" test $suites >>"$tmp/base"
  wall "$tmp/loomd-new" test $suites >>"$tmp/new"
done
b=$(median <"$tmp/base")
m=$(median <"$tmp/new")
echo "loomd test $suites"
echo "  before (hooks in pooled VMs): ${b}s"
echo "  now (hooks in the test's VM): ${m}s (ratio $(echo "scale=2; $m / $b" | bc))"
