#!/usr/bin/env bash
# What running a test's hooks in its own VM costs (issue 25: the gate's
# instruction hook, nested hooks, the handlers' thread): loomd test on the
# same suites with the binary before that change (BASE) and the current
# one, alternately N times; prints the median wall time and CPU time
# (user+sys: on a shared machine wall time measures the load) of each,
# their ranges, and the ratios. BASE defaults to the commit before "hooks
# of the test's type run in the test's own VM". The suites are the bundled
# ones both binaries pass (the others use what that commit added).
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
suites="plugins/digitalocean plugins/static plugins/aws plugins/google plugins/openstack plugins/chef-solo"
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
range() { sort -n | awk 'NR==1 {lo=$1} {hi=$1} END {print lo "-" hi}'; }
# wall and CPU seconds of one run; a failing suite stops the script
run() { /usr/bin/time -f '%e %U %S' -o "$tmp/t" "$@" >/dev/null 2>&1; awk '{print $1, $2 + $3}' "$tmp/t"; }
for i in $(seq "$n"); do
  run "$tmp/loomd-base" test $suites >>"$tmp/base"
  run "$tmp/loomd-new" test $suites >>"$tmp/new"
done
stat() { local c=$1 f=$2; echo "$(awk -v c="$c" '{print $c}' "$f" | median)s ($(awk -v c="$c" '{print $c}' "$f" | range))"; }
ratio() { echo "scale=2; $(awk -v c="$1" '{print $c}' "$tmp/new" | median) / $(awk -v c="$1" '{print $c}' "$tmp/base" | median)" | bc; }
echo "loomd test $suites ($n runs each, alternated; median (range))"
echo "  before (hooks in pooled VMs): wall $(stat 1 "$tmp/base"), CPU $(stat 2 "$tmp/base")"
echo "  now (hooks in the test's VM): wall $(stat 1 "$tmp/new"), CPU $(stat 2 "$tmp/new")"
echo "  ratio now/before: wall $(ratio 1), CPU $(ratio 2)"
