#!/usr/bin/env bash
# What `make adapters` costs a clean machine: for each adapter module, with
# an empty module cache and an empty build cache, the download (go list
# -deps -test fetches exactly the modules the build and tests need), then
# vet and test cold, then again warm. Run from the repository root.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp"; rm -rf "$tmp"' EXIT
now() { date +%s.%N; }
for m in ${ONLY:-machinecontroller bucketprovisioner}; do
  export GOMODCACHE=$tmp/mod-$m GOCACHE=$tmp/cache-$m GOFLAGS=-modcacherw
  echo "== adapters/$m (load $(cut -d' ' -f1-3 /proc/loadavg))"
  s=$(now); (cd adapters/$m && go list -deps -test ./... >/dev/null 2>&1); e=$(now)
  echo "download: $(echo "$e - $s" | bc) s; $(du -sh "$GOMODCACHE/cache/download" | cut -f1) of zips, $(du -sh "$GOMODCACHE" | cut -f1) on disk"
  s=$(now); (cd adapters/$m && go vet ./... && go test -count=1 ./... >/dev/null); e=$(now)
  echo "vet + test, cold build cache: $(echo "$e - $s" | bc) s"
  s=$(now); (cd adapters/$m && go vet ./... && go test -count=1 ./... >/dev/null); e=$(now)
  echo "vet + test, warm: $(echo "$e - $s" | bc) s (load $(cut -d' ' -f1-3 /proc/loadavg))"
done
