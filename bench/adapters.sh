#!/usr/bin/env bash
# What the Go adapter modules cost a clean machine: for each adapter
# module (and each alternate go.<tag>.mod of it, built with -tags <tag>),
# with an empty module cache and an empty build cache, the download (go
# list -deps -test fetches exactly the modules the build and tests need),
# then vet and test cold (the module cache warm, the build cache empty),
# then again warm. Run from the repository root; ONLY="kloud
# machinecontroller" limits the modules.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp"; rm -rf "$tmp"' EXIT
now() { date +%s.%N; }
for m in ${ONLY:-kloud machinecontroller bucketprovisioner}; do
  for f in $(cd adapters/$m && ls go.mod go.*.mod 2>/dev/null); do
    tag=${f#go.}; tag=${tag%.mod}; [ "$f" = go.mod ] && tag=
    id=$m${tag:+-$tag}
    export GOMODCACHE=$tmp/mod-$id GOCACHE=$tmp/cache-$id GOFLAGS=-modcacherw GONOSUMDB=k8c.io/machine-controller
    args=(-modfile=$f -tags "$tag")
    echo "== adapters/$m $f (load $(cut -d' ' -f1-3 /proc/loadavg))"
    s=$(now); (cd adapters/$m && go list "${args[@]}" -deps -test ./... >/dev/null 2>&1); e=$(now)
    echo "download: $(echo "$e - $s" | bc) s; $(du -sh "$GOMODCACHE/cache/download" | cut -f1) of zips, $(du -sh "$GOMODCACHE" | cut -f1) on disk"
    s=$(now); (cd adapters/$m && go vet "${args[@]}" ./... && go test "${args[@]}" -count=1 ./... >/dev/null); e=$(now)
    echo "vet + test, cold build cache: $(echo "$e - $s" | bc) s"
    s=$(now); (cd adapters/$m && go vet "${args[@]}" ./... && go test "${args[@]}" -count=1 ./... >/dev/null); e=$(now)
    echo "vet + test, warm: $(echo "$e - $s" | bc) s (load $(cut -d' ' -f1-3 /proc/loadavg))"
  done
done
