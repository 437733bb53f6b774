#!/usr/bin/env bash
# CPU and phase times of `loomd apply` creates through one `loomd serve`, for
# issue 26 item 5 (docs/benchmarks.md, "Issue 26 on a quiet machine").
#
#   bench/cluster-cpu.sh DIR LOOMD TAG "SERVE ARGS" [N] [PARALLELISM] [LOG LEVEL]
#
# DIR is a directory `bench-cluster -keep` left (its plugins/ and
# bench-<PARALLELISM>.yaml). The script starts `LOOMD serve` on a fresh data
# directory there with SERVE ARGS (e.g. "--cluster-tasks local --concurrency
# 128"), then runs N creates of the spec, one after another, each under its
# own cluster name. Per create it prints the wall time, the user+system CPU
# of the daemon and its worker processes (from /proc, 10 ms ticks), of the
# daemon alone, and of the CLI. With LOG LEVEL info it also prints, from the
# daemon's JSON log, the CLI's start to the job's submission, the job's own
# time, and the job's end to the CLI's exit. The first create of a daemon
# starts its workers: leave it out when comparing builds. Output goes to
# $OUT_DIR/TAG (default /tmp/bench-cluster-cpu/TAG).
set -uo pipefail
[ $# -ge 4 ] || { sed -n 2,17p "$0"; exit 2; }
D=$1 L=$2 TAG=$3 SA=$4 N=${5:-3} PAR=${6:-128} LL=${7:-warn}
OUT=${OUT_DIR:-/tmp/bench-cluster-cpu}/$TAG
rm -rf "$OUT" "$D/data-$TAG"; mkdir -p "$OUT"
PORT=$((20000 + RANDOM % 10000))
cd "$D" || exit 1
# shellcheck disable=SC2086 # SERVE ARGS is a list of flags
HOME=$D "$L" serve --listen 127.0.0.1:$PORT --data "$D/data-$TAG" --plugins "$D/plugins" --work-dir "$D/work" \
  --log-level "$LL" --log-format json $SA >"$OUT/serve.log" 2>&1 &
SP=$!
trap 'kill -INT $SP 2>/dev/null' EXIT
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break; sleep 0.1; done
self() { awk '{print $14 + $15}' /proc/$SP/stat; }
tree() {
  local t=0 a b p
  for p in $SP $(pgrep -P $SP); do
    read -r a b < <(awk '{print $14, $15}' /proc/$p/stat 2>/dev/null) || continue
    t=$((t + a + b))
  done
  echo $t
}
for k in $(seq "$N"); do
  sed "s/^name: .*/name: $TAG-$k/" "bench-$PAR.yaml" >"$OUT/c$k.yaml"
  c0=$(tree) d0=$(self) s=$(date +%s.%N)
  echo "$TAG-$k cli-start $(date -u +%T.%N)" >>"$OUT/tl.txt"
  /usr/bin/time -f "%U %S" -o "$OUT/cli$k.txt" env HOME="$D" "$L" apply "$OUT/c$k.yaml" --parallelism "$PAR" \
    --log-level warn --yes --server "http://127.0.0.1:$PORT" --plugins "$D/plugins" --work-dir "$D/work" \
    >"$OUT/apply$k.log" 2>&1
  rc=$?
  e=$(date +%s.%N); echo "$TAG-$k cli-end $(date -u +%T.%N)" >>"$OUT/tl.txt"
  c1=$(tree) d1=$(self)
  echo "$TAG apply $k: rc $rc, wall $(echo "$e - $s" | bc) s, daemon+workers cpu $(((c1 - c0) * 10)) ms" \
    "(daemon $(((d1 - d0) * 10)) ms), cli cpu $(cat "$OUT/cli$k.txt")"
done
kill -INT $SP; wait $SP; trap - EXIT
[ "$LL" = info ] || exit 0
for k in $(seq "$N"); do
  n=$TAG-$k
  at() { grep "\"$1\"" "$OUT/serve.log" | grep "\"cluster\":\"$n\"" | sed 's/.*"time":"[0-9-]*T\([0-9:.]*\)Z".*/\1/' | head -1; }
  cs=$(grep "^$n cli-start" "$OUT/tl.txt" | awk '{print $3}') ce=$(grep "^$n cli-end" "$OUT/tl.txt" | awk '{print $3}')
  python3 -c "
def t(s): h,m,x=s.split(':'); return int(h)*3600+int(m)*60+float(x)
print('$n', 'cli-start->submitted %.0f ms, job %.0f ms, job-end->cli-exit %.0f ms' % (
  (t('$(at 'cluster job submitted')')-t('$cs'))*1000, (t('$(at 'cluster job complete')')-t('$(at 'cluster job submitted')'))*1000,
  (t('$ce')-t('$(at 'cluster job complete')'))*1000))"
done
